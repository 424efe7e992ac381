//! What every calculator shares: its descriptor ([`Calculator`]), the schema property builders, the
//! typed reader over validated parameters ([`Params`]) and the result shape ([`Assessment`]).

use serde_json::{Map, Value, json};

use crate::tools::ToolError;

/// One calculator of CALCULATORS.md: its name, its own parameter schema and its formula.
pub(super) struct Calculator {
    pub name: &'static str,
    /// Human title, used in the tool description.
    pub title: &'static str,
    /// The exact JSON Schema of this calculator's `parameters` object (required fields, its own
    /// ranges, `additionalProperties: false`). Conditional rules (`if`/`then`) are allowed here: this
    /// schema is only used for validation, never sent to the model.
    pub schema: fn() -> Value,
    /// The formula, on parameters already validated against `schema`.
    pub compute: fn(&Params<'_>) -> Result<Assessment, ToolError>,
}

// === schema builders ===

/// A boolean criterion; absent means `false` (CALCULATORS.md §1).
pub(super) fn flag(description: &str) -> Value {
    json!({ "type": "boolean", "description": format!("{description} (default false)") })
}

/// A bounded number; the description carries the unit.
pub(super) fn number(description: &str, minimum: f64, maximum: f64) -> Value {
    json!({ "type": "number", "minimum": minimum, "maximum": maximum, "description": description })
}

/// A bounded integer.
pub(super) fn whole_number(description: &str, minimum: i64, maximum: i64) -> Value {
    json!({ "type": "integer", "minimum": minimum, "maximum": maximum, "description": description })
}

/// A string restricted to lower-case tokens (the enum bounds its length).
pub(super) fn choice(description: &str, tokens: &[&str]) -> Value {
    json!({ "type": "string", "enum": tokens, "description": description })
}

/// The `sex` parameter shared by several calculators.
pub(super) fn sex() -> Value {
    choice("Patient sex: male or female", &["male", "female"])
}

/// Age in whole or fractional years, adults only (all calculators here are adult scores).
pub(super) fn age_years() -> Value {
    number("Age in years (adults, 18-120)", 18.0, 120.0)
}

/// Serum creatinine in mg/dL; the range rejects µmol/L values by mistake (CALCULATORS.md §1).
pub(super) fn creatinine_mg_dl() -> Value {
    number("Serum creatinine in mg/dL (not µmol/L; divide µmol/L by 88.4)", 0.1, 20.0)
}

/// An object schema with `additionalProperties: false`.
pub(super) fn object(properties: Vec<(&str, Value)>, required: &[&str]) -> Value {
    let properties: Map<String, Value> =
        properties.into_iter().map(|(name, schema)| (name.to_string(), schema)).collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

// === reading parameters ===

/// Typed access to a calculator's validated parameters. The schema has already enforced types and
/// ranges; these accessors still fail softly (an `invalid_arguments` naming the field) rather than
/// panic if a caller skips validation.
pub(super) struct Params<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Params<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Self { map }
    }

    /// A boolean criterion, `false` when absent.
    pub fn flag(&self, name: &str) -> Result<bool, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(_) => Err(field_error(name, "must be true or false")),
        }
    }

    /// A required number.
    pub fn number(&self, name: &str) -> Result<f64, ToolError> {
        self.optional_number(name)?.ok_or_else(|| field_error(name, "is required"))
    }

    /// An optional number.
    pub fn optional_number(&self, name: &str) -> Result<Option<f64>, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_f64() {
                Some(number) if number.is_finite() => Ok(Some(number)),
                _ => Err(field_error(name, "must be a number")),
            },
        }
    }

    /// A string token, `default` when absent.
    pub fn token(&self, name: &str, default: &'a str) -> Result<&'a str, ToolError> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::String(text)) => Ok(text.as_str()),
            Some(_) => Err(field_error(name, "must be a string")),
        }
    }

    /// A required string token.
    pub fn required_token(&self, name: &str) -> Result<&'a str, ToolError> {
        match self.map.get(name) {
            Some(Value::String(text)) => Ok(text.as_str()),
            None | Some(Value::Null) => Err(field_error(name, "is required")),
            Some(_) => Err(field_error(name, "must be a string")),
        }
    }

    /// An input exactly as given (so 72 stays 72, not 72.0), for `parameters_used`.
    pub fn echo(&self, name: &str) -> Value {
        self.map.get(name).cloned().unwrap_or(Value::Null)
    }

    /// Whether `sex` is female (required wherever it is read).
    pub fn is_female(&self) -> Result<bool, ToolError> {
        match self.required_token("sex")? {
            "female" => Ok(true),
            "male" => Ok(false),
            _ => Err(field_error("sex", "must be one of male, female")),
        }
    }
}

/// An `invalid_arguments` error naming the field (same shape as `schema::check`), never its value.
pub(super) fn field_error(name: &str, problem: &str) -> ToolError {
    ToolError::InvalidArguments(format!("`/parameters/{name}`: {problem}"))
}

/// Echo booleans into `parameters_used` with their defaults filled in.
pub(super) fn echo_flags(
    params: &Params<'_>,
    names: &[&str],
    used: &mut Map<String, Value>,
) -> Result<(), ToolError> {
    for name in names {
        used.insert((*name).to_string(), Value::Bool(params.flag(name)?));
    }
    Ok(())
}

// === result ===

/// A calculator's outcome; becomes the seed's `MedicalScoreResult`.
pub(super) struct Assessment {
    /// A JSON integer for point scores and MELD; a one-decimal number for Wells PE, CrCl and BMI.
    pub score: Value,
    /// Free text with the probability or mortality figures of the band.
    pub interpretation: String,
    /// One of the calculator's fixed lower-case tokens.
    pub risk_category: &'static str,
    /// Short, guideline-level next steps; never a prescription.
    pub recommendations: Vec<String>,
    /// Every parameter as used: defaults filled in, clamped values as applied.
    pub parameters_used: Map<String, Value>,
}

impl Assessment {
    pub fn into_result(self, calculator_name: &str) -> Value {
        json!({
            "calculator_name": calculator_name,
            "score": self.score,
            "interpretation": self.interpretation,
            "risk_category": self.risk_category,
            "recommendations": self.recommendations,
            "parameters_used": self.parameters_used,
        })
    }
}

/// Turn static recommendation text into the owned list the result carries.
pub(super) fn lines(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_string()).collect()
}
