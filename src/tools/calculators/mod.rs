//! `calculate_medical_score`: the eight medical calculators of CALCULATORS.md behind one tool.
//! This file owns the tool itself (spec, model-facing schema, per-calculator validation, dispatch);
//! the formulas live in one file per calculator group.

mod atrial_fibrillation;
mod body;
mod common;
mod decimal;
mod grace;
mod meld;
#[cfg(test)]
mod tests;
mod wells;

use std::collections::BTreeMap;

use jsonschema::Validator;
use serde_json::{Map, Value, json};

use self::common::{Calculator, Params};
use super::{
    CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec, schema,
};

/// Every calculator, in the order the model sees them.
const CALCULATORS: [Calculator; 8] = [
    wells::WELLS_DVT,
    wells::WELLS_PE,
    atrial_fibrillation::CHADSVASC,
    atrial_fibrillation::HASBLED,
    grace::GRACE,
    meld::MELD,
    body::RENAL_DOSING,
    body::BMI,
];

/// The `calculate_medical_score` tool: deterministic, local, PHI in its arguments.
pub struct CalculateMedicalScore {
    spec: ToolSpec,
    /// Each calculator's own schema over the whole arguments object, compiled once at construction.
    /// A compile failure is a programming error: kept as `Err` (reported as `internal_error` on call,
    /// and caught by the tests) so that construction cannot panic.
    validators: BTreeMap<&'static str, Result<Validator, String>>,
}

/// The tool, ready to register.
pub fn tool() -> CalculateMedicalScore {
    CalculateMedicalScore::new()
}

impl Default for CalculateMedicalScore {
    fn default() -> Self {
        Self::new()
    }
}

impl CalculateMedicalScore {
    pub fn new() -> Self {
        let validators = CALCULATORS
            .iter()
            .map(|calculator| {
                let compiled = schema::compile(&arguments_schema(calculator));
                if let Err(reason) = &compiled {
                    tracing::error!(calculator = calculator.name, %reason, "calculator schema invalid");
                }
                (calculator.name, compiled)
            })
            .collect();
        let spec = ToolSpec {
            name: "calculate_medical_score",
            description: description(),
            parameters: model_schema(),
            category: Category::Calculation,
            phi: true,
            risk: Risk::Medium,
            requires_confirmation: false,
            third_party: false,
            rate_limit_per_minute: 50,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Self { spec, validators }
    }

    /// Validate `{calculator_name, parameters}` against the chosen calculator's own schema and compute
    /// the seed's `MedicalScoreResult`. Synchronous: the whole tool is pure computation.
    pub fn evaluate(&self, arguments: &Value) -> Result<Value, ToolError> {
        let name = arguments.get("calculator_name").and_then(Value::as_str).ok_or_else(|| {
            ToolError::InvalidArguments("`/calculator_name`: is required and must be a string".into())
        })?;
        let validator = self.validators.get(name).ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "`/calculator_name`: must be one of {}",
                calculator_names().join(", ")
            ))
        })?;
        let validator = validator.as_ref().map_err(|_| ToolError::Internal)?;
        schema::check(validator, arguments)?;
        let parameters = arguments
            .get("parameters")
            .and_then(Value::as_object)
            .ok_or_else(|| ToolError::InvalidArguments("`/parameters`: must be an object".into()))?;
        compute(name, parameters)
    }

    /// [`evaluate`](Self::evaluate) with the two arguments apart.
    pub fn calculate(
        &self,
        calculator_name: &str,
        parameters: &Map<String, Value>,
    ) -> Result<Value, ToolError> {
        self.evaluate(&json!({ "calculator_name": calculator_name, "parameters": parameters }))
    }
}

#[async_trait::async_trait]
impl Tool for CalculateMedicalScore {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        self.evaluate(&args).map(ToolOutput::new)
    }
}

/// The pure formula step on parameters that have passed the calculator's schema: the
/// `MedicalScoreResult` JSON. Unvalidated input still fails softly (`invalid_arguments`), never panics.
pub(crate) fn compute(calculator_name: &str, parameters: &Map<String, Value>) -> Result<Value, ToolError> {
    let calculator = find(calculator_name)
        .ok_or_else(|| ToolError::InvalidArguments("`/calculator_name`: is not a known calculator".into()))?;
    let assessment = (calculator.compute)(&Params::new(parameters))?;
    Ok(assessment.into_result(calculator.name))
}

fn find(name: &str) -> Option<&'static Calculator> {
    CALCULATORS.iter().find(|calculator| calculator.name == name)
}

fn calculator_names() -> Vec<&'static str> {
    CALCULATORS.iter().map(|calculator| calculator.name).collect()
}

/// One calculator's exact schema for the whole arguments object, so that `schema::check` names
/// fields as `/parameters/<name>`.
fn arguments_schema(calculator: &Calculator) -> Value {
    json!({
        "type": "object",
        "properties": {
            "calculator_name": { "const": calculator.name },
            "parameters": (calculator.schema)(),
        },
        "required": ["calculator_name", "parameters"],
        "additionalProperties": false,
    })
}

/// The schema the model sees: plain JSON Schema (no conditionals, which the Realtime API rejects),
/// with `parameters` the union of every calculator's parameters. Shared names take the widest range
/// and every value any calculator accepts; each description ends with the calculators that use it.
pub(crate) fn model_schema() -> Value {
    let mut union: Map<String, Value> = Map::new();
    let mut users: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for calculator in &CALCULATORS {
        let schema = (calculator.schema)();
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else { continue };
        for (name, property) in properties {
            users.entry(name.clone()).or_default().push(calculator.name);
            match union.get_mut(name) {
                Some(existing) => widen(existing, property),
                None => {
                    union.insert(name.clone(), property.clone());
                }
            }
        }
    }
    for (name, property) in union.iter_mut() {
        let used_by = users.get(name).map(|names| names.join(", ")).unwrap_or_default();
        let text = property.get("description").and_then(Value::as_str).unwrap_or_default().to_string();
        if let Some(property) = property.as_object_mut() {
            property.insert("description".into(), json!(format!("{text}. Used by: {used_by}.")));
        }
    }
    json!({
        "type": "object",
        "properties": {
            "calculator_name": {
                "type": "string",
                "enum": calculator_names(),
                "description": "Which calculator to run",
            },
            "parameters": {
                "type": "object",
                "description": "Inputs of the chosen calculator only. Booleans default to false.",
                "properties": union,
                "additionalProperties": false,
            },
        },
        "required": ["calculator_name", "parameters"],
        "additionalProperties": false,
    })
}

/// Merge another calculator's definition of a shared parameter: lowest minimum, highest maximum,
/// union of enum values. The first definition's type and description are kept.
fn widen(existing: &mut Value, other: &Value) {
    let Some(existing) = existing.as_object_mut() else { return };
    for (key, wider) in [("minimum", f64::lt as fn(&f64, &f64) -> bool), ("maximum", f64::gt)] {
        let current = existing.get(key).and_then(Value::as_f64);
        let candidate = other.get(key).and_then(Value::as_f64);
        if let (Some(current), Some(candidate), Some(raw)) = (current, candidate, other.get(key))
            && wider(&candidate, &current)
        {
            existing.insert(key.to_string(), raw.clone());
        }
    }
    if let (Some(Value::Array(values)), Some(Value::Array(more))) =
        (existing.get_mut("enum"), other.get("enum"))
    {
        for value in more {
            if !values.contains(value) {
                values.push(value.clone());
            }
        }
    }
}

/// The tool description: when to use it, and every calculator with its parameter names.
fn description() -> String {
    let mut text = String::from(
        "Calculate a validated clinical score from values the user has given. Use it when the user asks \
         for one of the scores below, for renal dose adjustment (creatinine clearance) or for BMI. Do not \
         guess missing values: ask for required ones. Set calculator_name and put that calculator's \
         inputs in parameters (units are in the names; booleans default to false). Calculators:",
    );
    for calculator in &CALCULATORS {
        let schema = (calculator.schema)();
        let names = |key: &str| -> Vec<String> {
            match schema.get(key) {
                Some(Value::Object(map)) => map.keys().cloned().collect(),
                Some(Value::Array(list)) => {
                    list.iter().filter_map(Value::as_str).map(str::to_string).collect()
                }
                _ => Vec::new(),
            }
        };
        let required = names("required");
        let optional: Vec<String> =
            names("properties").into_iter().filter(|name| !required.contains(name)).collect();
        text.push_str(&format!("\n- {} ({}):", calculator.name, calculator.title));
        let mut groups = Vec::new();
        if !required.is_empty() {
            groups.push(format!("required {}", required.join(", ")));
        }
        if !optional.is_empty() {
            groups.push(format!("optional {}", optional.join(", ")));
        }
        text.push_str(&format!(" {}.", groups.join("; ")));
    }
    text.push_str(
        "\nmeld also needs sodium_mmol_l unless version is meld, and albumin_g_dl and sex for meld_3_0; \
         renal_dosing needs height_cm for weight_basis ideal or adjusted.",
    );
    text
}
