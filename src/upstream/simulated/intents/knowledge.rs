//! Requests for the knowledge tools:
//!
//! - `generate_differential_diagnosis`: "differential for a 65 year old man with chest pain,
//!   sweating and shortness of breath; history of hypertension and smoking" — age, sex, the first
//!   finding as chief complaint, the rest as symptoms, and what follows "history of" as history.
//! - `web_search_medical`: "search the web for X", "web search X", "look online for X" (optionally
//!   "on cdc.gov" to narrow it).
//! - `search_openevidence`: "what is the evidence for X", "evidence on X", "OpenEvidence X".

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::{Pattern, Understood, captures, clip, group, is_match};

const DDX: &str = "generate_differential_diagnosis";
const WEB: &str = "web_search_medical";
const EVIDENCE: &str = "search_openevidence";
const MAX_QUERY: usize = 200;
const MAX_ITEM: usize = 150;
/// Items asked for (the tool allows up to 15).
const DDX_RESULTS: u32 = 5;

static DDX_WORDS: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\bdifferentials?\b|\bddx\b|\bwhat could cause\b").ok());
static AGE: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\b(\d{1,3})[- ]?(?:years?|yrs?|y)[- ]?(?:old|o)\b").ok());
static MALE: Pattern = LazyLock::new(|| Regex::new(r"(?i)\b(?:man|male|gentleman|boy|he)\b").ok());
static FEMALE: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\b(?:woman|female|lady|girl|she)\b").ok());
/// The findings: after the first "with" or "presenting with", up to "history of" or the end.
static FINDINGS: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:presenting\s+with|with|for)\s+(.+?)(?:[;.]?\s*(?:(?:past\s+medical\s+)?history\s+of|hx\s+of|pmh)\b|$)").ok()
});
static HISTORY: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:(?:past\s+medical\s+)?history\s+of|hx\s+of|pmh:?)\s+(.+)$").ok()
});
/// A subject phrase ("a 65 year old man") that precedes the findings and is not itself one.
static SUBJECT: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:an?\s+)?(?:\d{1,3}[- ]?(?:years?|yrs?|y)[- ]?(?:old|o)\s+)?(?:man|male|woman|female|patient|boy|girl|child|gentleman|lady)\b\s*(?:with\s+|presenting\s+with\s+)?").ok()
});
static LIST_SPLIT: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\s*(?:,|;|\band\b|\bplus\b)\s*").ok());

static WEB_QUERY: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:search\s+the\s+(?:web|internet)\s+for|web\s+search\s+(?:for\s+)?|search\s+online\s+for|look\s+online\s+for)\s+(.+)").ok()
});
static WEB_SITE: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\s+on\s+((?:[a-z0-9-]+\.)+[a-z]{2,})\s*[.?!]*$").ok());
static EVIDENCE_QUERY: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:what\s+is\s+the\s+evidence|what's\s+the\s+evidence|evidence|openevidence)\s*(?:for|on|about|regarding|behind|:)?\s+(.+)").ok()
});
static TRAILER: Pattern = LazyLock::new(|| Regex::new(r"(?i)(?:\s+please|[\s.?!,;:]+)+$").ok());

pub(super) fn understand(text: &str, lower: &str) -> Option<Understood> {
    if is_match(&DDX_WORDS, lower) {
        return Some(differential(text, lower));
    }
    if let Some(caps) = captures(&WEB_QUERY, text) {
        return Some(web_search(group(&caps, 1).unwrap_or_default()));
    }
    if lower.contains("evidence") {
        let query = captures(&EVIDENCE_QUERY, text).and_then(|caps| group(&caps, 1).map(tidy));
        return Some(match query.filter(|q| !q.is_empty()) {
            Some(query) => Understood::Call {
                tool: EVIDENCE,
                arguments: json!({"query": query, "max_results": 5}),
            },
            None => Understood::NeedMore {
                tool: EVIDENCE,
                ask: "What question should I look up the evidence for?".into(),
            },
        });
    }
    None
}

fn tidy(text: &str) -> String {
    let text = match TRAILER.as_ref() {
        Some(re) => re.replace(text.trim(), "").into_owned(),
        None => text.trim().to_string(),
    };
    clip(text.trim(), MAX_QUERY)
}

fn web_search(rest: &str) -> Understood {
    let (query, site) = match captures(&WEB_SITE, rest) {
        Some(caps) => {
            let site = group(&caps, 1).map(str::to_lowercase);
            let cut = caps.get(0).map_or(rest.len(), |m| m.start());
            (tidy(&rest[..cut]), site)
        }
        None => (tidy(rest), None),
    };
    if query.is_empty() {
        return Understood::NeedMore {
            tool: WEB,
            ask: "What should I search the web for?".into(),
        };
    }
    let mut arguments = json!({"query": query, "max_results": 5});
    if let Some(site) = site {
        arguments["domain_filter"] = json!([site]);
    }
    Understood::Call {
        tool: WEB,
        arguments,
    }
}

fn items(list: &str) -> Vec<String> {
    let Some(split) = LIST_SPLIT.as_ref() else {
        return vec![tidy(list)];
    };
    split
        .split(list)
        .map(tidy)
        .filter(|item| !item.is_empty())
        .map(|item| clip(&item, MAX_ITEM))
        .take(20)
        .collect()
}

fn differential(text: &str, lower: &str) -> Understood {
    let findings = captures(&FINDINGS, text)
        .and_then(|caps| group(&caps, 1).map(String::from))
        .map(|found| {
            // "for a 65 year old man with chest pain": the subject is not a finding.
            match SUBJECT.as_ref() {
                Some(re) => re.replace(&found, "").into_owned(),
                None => found,
            }
        });
    let mut findings = findings.map(|f| items(&f)).unwrap_or_default();
    if findings.is_empty() {
        return Understood::NeedMore {
            tool: DDX,
            ask: "What are the main complaint and the symptoms? For example: a 65 year old man with chest pain \
                  and shortness of breath."
                .into(),
        };
    }
    let chief = findings.remove(0);
    let symptoms = if findings.is_empty() {
        vec![chief.clone()]
    } else {
        findings
    };
    let mut arguments: Value =
        json!({"chief_complaint": chief, "symptoms": symptoms, "max_results": DDX_RESULTS});
    if let Some(age) = captures(&AGE, text)
        .and_then(|caps| group(&caps, 1)?.parse::<u32>().ok())
        .filter(|a| *a <= 120)
    {
        arguments["patient_age"] = json!(age);
    }
    let sex = if is_match(&FEMALE, lower) {
        Some("F")
    } else if is_match(&MALE, lower) {
        Some("M")
    } else {
        None
    };
    if let Some(sex) = sex {
        arguments["patient_sex"] = json!(sex);
    }
    if let Some(history) = captures(&HISTORY, text).and_then(|caps| group(&caps, 1).map(items))
        && !history.is_empty()
    {
        arguments["relevant_history"] = json!(history);
    }
    Understood::Call {
        tool: DDX,
        arguments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(text: &str) -> (&'static str, Value) {
        match understand(text, &text.to_lowercase()) {
            Some(Understood::Call { tool, arguments }) => (tool, arguments),
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn all_patterns_compile() {
        let all = [
            &DDX_WORDS,
            &AGE,
            &MALE,
            &FEMALE,
            &FINDINGS,
            &HISTORY,
            &SUBJECT,
            &LIST_SPLIT,
            &WEB_QUERY,
            &WEB_SITE,
            &EVIDENCE_QUERY,
            &TRAILER,
        ];
        assert!(all.iter().all(|p| p.is_some()));
    }

    #[test]
    fn a_differential_request_gives_the_seed_shaped_arguments() {
        let (tool, args) = call(
            "Differential for a 65 year old man with chest pain, shortness of breath, sweating and pain radiating to the left arm; \
             history of hypertension, diabetes and smoking",
        );
        assert_eq!(tool, DDX);
        assert_eq!(
            args,
            json!({"chief_complaint": "chest pain", "symptoms": ["shortness of breath", "sweating", "pain radiating to the left arm"],
                "patient_age": 65, "patient_sex": "M", "relevant_history": ["hypertension", "diabetes", "smoking"], "max_results": 5})
        );
        let (_, args) = call("ddx: 30 year old woman with headache");
        assert_eq!(args["chief_complaint"], "headache");
        assert_eq!(args["symptoms"], json!(["headache"]));
        assert_eq!(args["patient_sex"], "F");
        assert!(matches!(
            understand("give me a differential", "give me a differential"),
            Some(Understood::NeedMore { .. })
        ));
    }

    #[test]
    fn web_and_evidence_requests() {
        assert_eq!(
            call("Search the web for measles outbreak guidance"),
            (
                WEB,
                json!({"query": "measles outbreak guidance", "max_results": 5})
            )
        );
        assert_eq!(
            call("search the web for measles vaccine schedule on cdc.gov"),
            (
                WEB,
                json!({"query": "measles vaccine schedule", "max_results": 5, "domain_filter": ["cdc.gov"]})
            )
        );
        assert_eq!(
            call("What is the evidence for beta blockers in heart failure?"),
            (
                EVIDENCE,
                json!({"query": "beta blockers in heart failure", "max_results": 5})
            )
        );
        assert!(understand("good morning", "good morning").is_none());
    }
}
