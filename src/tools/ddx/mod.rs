//! `generate_differential_diagnosis`: a ranked differential for a presentation, from a knowledge
//! base of conditions shipped in the repo ([`kb`]), matched with synonym- and negation-aware scoring
//! ([`matcher`]), optionally re-ranked and explained by an operator's PHI-safe LLM ([`llm`]).
//!
//! The tool handles PHI (the patient's findings), so it runs locally: its arguments are never
//! audited and nothing leaves the process unless the operator configured `backends.ddx.llm_url`,
//! an endpoint they have declared PHI-safe. Whatever the LLM does — fail, time out, answer
//! something that is not the result schema or names a condition that was not a candidate — the
//! knowledge-base answer is returned, so the tool always answers.

mod kb;
mod llm;
mod matcher;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde_json::{Value, json};

use self::kb::Sex;
pub use self::kb::{KbError, KnowledgeBase};
use self::llm::Reranker;
use self::matcher::{Case, Ranked, Recognised};
use super::registry::RegistryError;
use super::{
    CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec, args,
};
use crate::config::DdxBackendConfig;

const NAME: &str = "generate_differential_diagnosis";
const DEFAULT_RESULTS: u64 = 10;
const MAX_RESULTS: u64 = 15;
const MAX_SYMPTOMS: u64 = 30;
const MAX_HISTORY: u64 = 30;
const MAX_ITEM_CHARS: u64 = 200;
/// A must-not-miss condition scoring at least this share of the leader's score is always listed.
const MUST_NOT_MISS_RATIO: f64 = 0.3;
/// The seed's disclaimers, always present whatever produced the list.
const DISCLAIMERS: [&str; 2] = [
    "This is not a substitute for clinical judgment",
    "Consider patient context and physical exam findings",
];

/// The differential tool: one knowledge base shared by every session.
pub struct DifferentialDiagnosis {
    spec: ToolSpec,
    kb: Arc<KnowledgeBase>,
    reranker: Option<Reranker>,
}

impl std::fmt::Debug for DifferentialDiagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DifferentialDiagnosis")
            .field("conditions", &self.kb.conditions.len())
            .finish()
    }
}

/// The tool for `config`; a bad operator knowledge base or LLM URL is refused by name.
pub fn tool(config: &DdxBackendConfig) -> Result<DifferentialDiagnosis, RegistryError> {
    let backend = |reason: String| RegistryError::Backend {
        family: "ddx",
        reason,
    };
    let kb = match &config.knowledge_base_path {
        Some(path) => KnowledgeBase::from_file(path),
        None => KnowledgeBase::embedded(),
    }
    .map_err(|e| backend(e.to_string()))?;
    let reranker = Reranker::from_config(config).map_err(backend)?;
    Ok(DifferentialDiagnosis::new(kb, reranker))
}

impl DifferentialDiagnosis {
    fn new(kb: KnowledgeBase, reranker: Option<Reranker>) -> Self {
        let spec = ToolSpec {
            name: NAME,
            description: format!(
                "Generate a ranked differential diagnosis from a chief complaint, symptoms (include \
                 pertinent negatives such as \"no fever\"), age, sex and relevant history. Draws on a curated \
                 knowledge base of {} common and must-not-miss conditions; returns each candidate's \
                 probability, matching and missing features and first workup. Decision support only.",
                kb.conditions.len()
            ),
            parameters: parameters(),
            category: Category::Medical,
            phi: true,
            risk: Risk::Medium,
            requires_confirmation: false,
            third_party: false,
            rate_limit_per_minute: 30,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Self {
            spec,
            kb: Arc::new(kb),
            reranker,
        }
    }
}

fn parameters() -> Value {
    let item = json!({"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS});
    json!({
        "type": "object",
        "properties": {
            "chief_complaint": {
                "type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS,
                "description": "The presenting complaint, e.g. \"chest pain\".",
            },
            "symptoms": {
                "type": "array", "items": item, "minItems": 1, "maxItems": MAX_SYMPTOMS,
                "description": "Symptoms and signs, one per item; negatives as \"no fever\".",
            },
            "patient_age": {"type": "integer", "minimum": 0, "maximum": 120, "description": "Age in years."},
            "patient_sex": {"type": "string", "enum": ["M", "F", "Other"]},
            "relevant_history": {
                "type": "array", "items": item, "maxItems": MAX_HISTORY,
                "description": "Risk factors and history, e.g. \"hypertension\", \"smoking history\".",
            },
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": DEFAULT_RESULTS},
        },
        "required": ["chief_complaint", "symptoms"],
        "additionalProperties": false,
    })
}

fn strings(args: &Value, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn case_from(args: &Value) -> Result<(Case, usize), ToolError> {
    let chief_complaint = args::required_text(args, "chief_complaint")?;
    let sex = match args.get("patient_sex").and_then(Value::as_str) {
        Some("M") => Some(Sex::M),
        Some("F") => Some(Sex::F),
        _ => None,
    };
    let age = args::whole_number(args, "patient_age").and_then(|a| u32::try_from(a).ok());
    let max = args::count(args, "max_results", DEFAULT_RESULTS, MAX_RESULTS);
    let case = Case {
        chief_complaint,
        symptoms: strings(args, "symptoms"),
        age,
        sex,
        history: strings(args, "relevant_history"),
    };
    Ok((case, max as usize))
}

/// The best `max` candidates, with the must-not-miss candidates the findings point to kept in the
/// list: they take the places of the lowest-ranked ordinary ones. "Point to" means a score of at
/// least [`MUST_NOT_MISS_RATIO`] of the leader's, so that one shared finding (sweating) does not
/// crowd the list with every dangerous condition that has it.
fn select<'kb>(ranked: Vec<Ranked<'kb>>, max: usize) -> Vec<Ranked<'kb>> {
    let floor = ranked
        .first()
        .map_or(0.0, |lead| lead.score * MUST_NOT_MISS_RATIO);
    let (mut chosen, rest): (Vec<_>, Vec<_>) =
        ranked.into_iter().enumerate().partition(|(i, _)| *i < max);
    for (_, candidate) in rest
        .into_iter()
        .filter(|(_, r)| r.condition.must_not_miss && r.score >= floor)
    {
        match chosen.iter().rposition(|(_, r)| !r.condition.must_not_miss) {
            Some(at) if at > 0 => {
                chosen.remove(at);
                chosen.push((0, candidate));
            }
            _ => break,
        }
    }
    chosen.into_iter().map(|(_, r)| r).collect()
}

/// "high" / "medium" / "low" relative to the leading candidate and to how much of the condition's
/// picture is present.
fn probability(candidate: &Ranked<'_>, best: f64) -> &'static str {
    let relative = if best > 0.0 {
        candidate.score / best
    } else {
        0.0
    };
    if relative >= 0.8 && candidate.coverage >= 0.4 {
        "high"
    } else if relative >= 0.45 {
        "medium"
    } else {
        "low"
    }
}

/// The seed's `GenerateDifferentialDiagnosisResult` from the knowledge base alone.
fn kb_result(
    kb: &KnowledgeBase,
    case: &Case,
    chosen: &[Ranked<'_>],
    recognised: &Recognised,
) -> Value {
    let best = chosen.first().map_or(0.0, |c| c.score);
    let diagnoses: Vec<Value> = chosen
        .iter()
        .map(|c| {
            json!({
                "diagnosis": c.condition.name,
                "probability": probability(c, best),
                "key_features": c.key_features,
                "missing_features": c.missing_features,
                "next_steps": c.condition.next_steps,
                "must_not_miss": c.condition.must_not_miss,
            })
        })
        .collect();
    json!({
        "chief_complaint": case.chief_complaint,
        "diagnoses": diagnoses,
        "reasoning": reasoning(kb, chosen, recognised),
        "disclaimers": disclaimers(kb),
    })
}

fn disclaimers(kb: &KnowledgeBase) -> Vec<String> {
    let mut list: Vec<String> = DISCLAIMERS.iter().map(|d| d.to_string()).collect();
    list.push(format!(
        "Ranked from a knowledge base of {} conditions; conditions outside it are not considered",
        kb.conditions.len()
    ));
    list
}

fn reasoning(kb: &KnowledgeBase, chosen: &[Ranked<'_>], recognised: &Recognised) -> String {
    let Some(lead) = chosen.first() else {
        return format!(
            "None of the {} conditions in the knowledge base matched the findings given; \
             describe the symptoms in more detail or use clinical judgement.",
            kb.conditions.len()
        );
    };
    // The case's own words come last: a result too large for one output is cut at the reasoning's
    // end (`llm::fit`), and the red flags are said nowhere else.
    let mut text = format!(
        "Ranked by how much of each condition's typical picture is present ({} findings recognised, {} stated \
         absent), weighted by risk factors, age and sex. Leading: {}.",
        recognised.present, recognised.absent, lead.condition.name,
    );
    let mnm: Vec<&str> = chosen
        .iter()
        .filter(|c| c.condition.must_not_miss)
        .map(|c| c.condition.name.as_str())
        .collect();
    if !mnm.is_empty() {
        text.push_str(&format!(" Must not miss: {}.", mnm.join("; ")));
    }
    if let Some(flags) = chosen
        .iter()
        .find(|c| c.condition.must_not_miss)
        .map(|c| &c.condition.red_flags)
        && !flags.is_empty()
    {
        text.push_str(&format!(" Red flags to check: {}.", flags.join("; ")));
    }
    text.push_str(&format!(" Findings for the leading diagnosis: {}.", lead.key_features.join(", ")));
    if !recognised.unrecognised.is_empty() {
        text.push_str(&format!(
            " Not recognised by the knowledge base: {}.",
            recognised.unrecognised.join("; ")
        ));
    }
    text
}

/// The knowledge-base answer, cut like the LLM's: every candidate quotes the case's statements
/// whole, so a verbose case would not fit one function-call output. It is cut only here, after it
/// was shown to the LLM, whose answer is matched to it by position.
fn kb_output(mut result: Value) -> ToolOutput {
    llm::fit(&mut result);
    ToolOutput::new(result)
}

#[async_trait::async_trait]
impl Tool for DifferentialDiagnosis {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let (case, max) = case_from(&args)?;
        let (ranked, recognised) = matcher::rank(&self.kb, &case);
        let chosen = select(ranked, max);
        let fallback = kb_result(&self.kb, &case, &chosen, &recognised);
        let Some(reranker) = &self.reranker else {
            return Ok(kb_output(fallback));
        };
        if chosen.is_empty() {
            return Ok(kb_output(fallback));
        }
        match reranker.rerank(&args, &fallback, &chosen).await {
            Ok(mut result) => {
                result["chief_complaint"] = json!(case.chief_complaint);
                result["disclaimers"] = json!(disclaimers(&self.kb));
                llm::fit(&mut result);
                Ok(ToolOutput::new(result))
            }
            Err(reason) => {
                tracing::warn!(%reason, "differential LLM not used; returning the knowledge-base ranking");
                // The model is told what it got: the explanation service was not used. First, since
                // `fit` cuts the reasoning's end.
                let mut result = fallback;
                let note = "The re-ranking service was unavailable; this is the knowledge-base ranking.";
                if let Some(text) = result["reasoning"].as_str() {
                    result["reasoning"] = json!(format!("{note} {text}"));
                }
                Ok(kb_output(result))
            }
        }
    }
}
