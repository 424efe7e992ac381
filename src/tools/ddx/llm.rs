//! The optional re-ranking step: the knowledge base's candidates and the case go to an
//! OpenAI-compatible `POST {llm_url}/chat/completions` that the operator has declared PHI-safe, which
//! answers with the same result object, re-ordered and explained.
//!
//! The answer is trusted only as far as it checks out: it must be JSON matching the result schema
//! (jsonschema), and every diagnosis must be one of the candidates (by name or synonym) — the LLM
//! re-ranks, it does not invent. A must-not-miss candidate it dropped is put back. Anything else,
//! or no answer within `backends.ddx.llm_timeout_ms` — or within what is left of the tool's own
//! timeout, when that ends sooner ([`time_left`]) — is an error and the caller falls back.
//!
//! What it may say is bounded too (TOOLS.md's 32 KiB per result): only the seed's fields are kept,
//! each text cut, and [`fit`] shortens the lists until the whole result fits.

use std::time::Duration;

use jsonschema::Validator;
use serde_json::{Value, json};
use url::Url;

use super::matcher::Ranked;
use crate::config::{DdxBackendConfig, Secret};
use crate::tools::http;
use crate::tools::text::{MAX_RESULT_BYTES, truncate};

/// Largest answer read from the LLM.
const MAX_BODY_BYTES: usize = 512 * 1024;
/// Kept of the LLM's answer: items per list, characters per item and of the reasoning. The schema
/// allows far more (30 lists of 30 × 500 characters), which no spoken answer needs.
const LIST_ITEMS: usize = 10;
const ITEM_CHARS: usize = 200;
const REASONING_CHARS: usize = 1500;
/// Kept back from the call's deadline for what follows an abandoned LLM request: building the
/// knowledge-base answer and handing it back before the tool's timeout cuts the call off.
const DEADLINE_MARGIN: Duration = Duration::from_millis(250);
/// The per-diagnosis lists, in the order they are shortened when the result is too large.
const LISTS: [&str; 3] = ["missing_features", "key_features", "next_steps"];

const SYSTEM_PROMPT: &str = "You are a clinical decision-support assistant. You receive a case and \
candidate diagnoses ranked by a knowledge base. Re-rank the candidates for this case and explain \
briefly. Use only the candidates' diagnosis names exactly as given; do not add new diagnoses; keep \
every candidate marked must_not_miss. Answer with one JSON object only: {\"chief_complaint\": string, \
\"diagnoses\": [{\"diagnosis\": string, \"probability\": \"high\"|\"medium\"|\"low\", \"key_features\": \
[string], \"missing_features\": [string], \"next_steps\": [string]}], \"reasoning\": string, \
\"disclaimers\": [string]}.";

/// The configured LLM endpoint.
pub struct Reranker {
    http: reqwest::Client,
    endpoint: Url,
    api_key: Option<Secret>,
    model: String,
    timeout: Duration,
    schema: Validator,
}

impl Reranker {
    /// `None` when no `llm_url` is configured.
    pub fn from_config(config: &DdxBackendConfig) -> Result<Option<Self>, String> {
        let Some(url) = &config.llm_url else {
            return Ok(None);
        };
        let endpoint = http::base_url(url, "backends.ddx.llm_url")?
            .join("chat/completions")
            .map_err(|_| "backends.ddx.llm_url cannot take a path".to_string())?;
        let timeout = Duration::from_millis(config.llm_timeout_ms());
        let schema = crate::tools::schema::compile(&result_schema())?;
        Ok(Some(Self {
            http: http::client(timeout)?,
            endpoint,
            api_key: config.llm_api_key.clone(),
            model: config.llm_model.clone().unwrap_or_default(),
            timeout,
            schema,
        }))
    }

    /// The LLM's checked result with only the seed's fields, each cut (`truncated: true` when
    /// anything was), or why it cannot be used (safe to log: no case text, no body).
    pub async fn rerank(
        &self,
        args: &Value,
        fallback: &Value,
        candidates: &[Ranked<'_>],
    ) -> Result<Value, String> {
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": json!({"case": args, "candidates": fallback["diagnoses"]}).to_string()},
            ],
        });
        let send = http::with_retries("differential LLM", || {
            let mut request = self.http.post(self.endpoint.clone()).json(&body);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key.expose());
            }
            http::attempt(request, MAX_BODY_BYTES)
        });
        let budget = time_left(self.timeout).saturating_sub(DEADLINE_MARGIN);
        if budget.is_zero() {
            return Err("no time left before the call's deadline".into());
        }
        let bytes = tokio::time::timeout(budget, send)
            .await
            .map_err(|_| "timed out".to_string())?
            .map_err(|failure| failure.to_string())?;
        let reply: Value =
            serde_json::from_slice(&bytes).map_err(|_| "the reply is not JSON".to_string())?;
        let content = reply
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or("the reply has no message content")?;
        let mut result: Value = serde_json::from_str(strip_fence(content))
            .map_err(|_| "the message content is not a JSON object".to_string())?;
        if let Some(problem) = self.schema.iter_errors(&result).next() {
            return Err(format!(
                "the answer does not match the result schema at {}",
                problem.instance_path()
            ));
        }
        align(&mut result, fallback, candidates)?;
        Ok(bounded(&result))
    }
}

/// How long until the running call's deadline (the tool's `timeout_ms`, set by the session with
/// `tools::http::within_deadline`), at most `max`; `max` outside a call.
fn time_left(max: Duration) -> Duration {
    http::time_left().map_or(max, |left| left.min(max))
}

/// Models sometimes wrap JSON in a Markdown code fence despite being asked not to.
fn strip_fence(content: &str) -> &str {
    let trimmed = content.trim();
    trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .map_or(trimmed, str::trim)
}

/// Map each diagnosis to its candidate (the knowledge base's canonical name and must-not-miss flag),
/// refuse unknown ones, and append must-not-miss candidates the answer left out.
fn align(result: &mut Value, fallback: &Value, candidates: &[Ranked<'_>]) -> Result<(), String> {
    let Some(diagnoses) = result.get_mut("diagnoses").and_then(Value::as_array_mut) else {
        return Err("no diagnoses".into());
    };
    let mut used = vec![false; candidates.len()];
    for item in diagnoses.iter_mut() {
        let named = item["diagnosis"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_lowercase();
        let index = candidates
            .iter()
            .position(|c| {
                c.condition.name.to_lowercase() == named
                    || c.condition.id == named
                    || c.condition
                        .synonyms
                        .iter()
                        .any(|s| s.to_lowercase() == named)
            })
            .ok_or("a diagnosis is not one of the candidates")?;
        if std::mem::replace(&mut used[index], true) {
            return Err("a candidate is listed twice".into());
        }
        item["diagnosis"] = json!(candidates[index].condition.name);
        item["must_not_miss"] = json!(candidates[index].condition.must_not_miss);
    }
    let kept: Vec<Value> = candidates
        .iter()
        .zip(&used)
        .enumerate()
        .filter(|(_, (c, used))| c.condition.must_not_miss && !**used)
        .filter_map(|(i, _)| fallback["diagnoses"].get(i).cloned())
        .collect();
    diagnoses.extend(kept);
    Ok(())
}

/// The seed's fields of a checked answer (anything else it added is left out), every text cut.
fn bounded(result: &Value) -> Value {
    let mut cut = false;
    let text = |value: &Value, max: usize, cut: &mut bool| {
        let (text, was_cut) = truncate(value.as_str().unwrap_or_default(), max);
        *cut |= was_cut;
        text
    };
    let mut diagnoses = Vec::new();
    for item in result["diagnoses"].as_array().map(Vec::as_slice).unwrap_or_default() {
        // `diagnosis` and `must_not_miss` are the knowledge base's own (see `align`).
        let mut clean = json!({
            "diagnosis": item["diagnosis"], "probability": item["probability"],
            "must_not_miss": item["must_not_miss"],
        });
        for list in LISTS {
            let all = item[list].as_array().map(Vec::as_slice).unwrap_or_default();
            cut |= all.len() > LIST_ITEMS;
            let kept: Vec<String> = all.iter().take(LIST_ITEMS).map(|entry| text(entry, ITEM_CHARS, &mut cut)).collect();
            clean[list] = json!(kept);
        }
        diagnoses.push(clean);
    }
    let reasoning = text(&result["reasoning"], REASONING_CHARS, &mut cut);
    let mut clean = json!({"chief_complaint": "", "diagnoses": diagnoses, "reasoning": reasoning, "disclaimers": []});
    if cut {
        clean["truncated"] = json!(true);
    }
    clean
}

/// Shorten a finished result, the LLM's or the knowledge base's, until it serialises to at most
/// [`MAX_RESULT_BYTES`]: the feature and next-step lists first (to five items, two, one, none),
/// then the reasoning's end (where the knowledge base's quotes the case's statements), the last-ranked
/// diagnoses only if that is not enough. Marks the result `truncated` when anything was dropped.
pub fn fit(result: &mut Value) {
    let too_big = |result: &Value| result.to_string().len() > MAX_RESULT_BYTES;
    let mut cut = false;
    for keep in [LIST_ITEMS / 2, 2, 1, 0] {
        if !too_big(result) {
            break;
        }
        for item in result["diagnoses"].as_array_mut().map(Vec::as_mut_slice).unwrap_or_default() {
            for list in LISTS {
                if let Some(entries) = item[list].as_array_mut() {
                    cut |= entries.len() > keep;
                    entries.truncate(keep);
                }
            }
        }
    }
    if too_big(result) {
        let (reasoning, was_cut) = truncate(result["reasoning"].as_str().unwrap_or_default(), REASONING_CHARS);
        result["reasoning"] = json!(reasoning);
        cut |= was_cut;
    }
    while too_big(result) && result["diagnoses"].as_array().is_some_and(|d| d.len() > 1) {
        if let Some(diagnoses) = result["diagnoses"].as_array_mut() {
            diagnoses.pop();
            cut = true;
        }
    }
    if cut {
        result["truncated"] = json!(true);
    }
}

/// The seed's result model as a JSON Schema: what an LLM answer must look like.
fn result_schema() -> Value {
    let list =
        json!({"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 30});
    json!({
        "type": "object",
        "properties": {
            "chief_complaint": {"type": "string"},
            "diagnoses": {
                "type": "array",
                "minItems": 1,
                "maxItems": 30,
                "items": {
                    "type": "object",
                    "properties": {
                        "diagnosis": {"type": "string", "minLength": 1, "maxLength": 200},
                        "probability": {"enum": ["high", "medium", "low"]},
                        "key_features": list,
                        "missing_features": list,
                        "next_steps": list,
                    },
                    "required": ["diagnosis", "probability", "key_features", "missing_features", "next_steps"],
                },
            },
            "reasoning": {"type": "string", "minLength": 1, "maxLength": 4000},
            "disclaimers": list,
        },
        "required": ["diagnoses", "reasoning"],
    })
}
