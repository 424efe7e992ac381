//! Ranking the knowledge base's conditions against a case: which findings the clinician named (by
//! any synonym in the vocabulary), which they named as absent ("no fever", "denies chest pain"),
//! and how well each condition's weighted findings, risk factors and age/sex priors fit.
//!
//! This is transparent arithmetic, not a trained model: every point a condition gets comes from a
//! weight in `data/ddx/knowledge_base.json`, so a surprising ranking can be traced and fixed there.

use std::collections::BTreeMap;

use super::kb::{Condition, KnowledgeBase, Sex};

/// Words that negate what follows them in the same clause.
const NEGATIONS: &[&str] = &[
    "no", "not", "denies", "denied", "deny", "without", "negative", "absent", "never", "nil",
    "free",
];
/// How many words before a phrase a negation still reaches.
const NEGATION_REACH: usize = 5;
/// Words that end a clause (and so a negation's reach) besides punctuation.
const CLAUSE_BREAKS: &[&str] = &["but", "however", "although", "though", "yet"];
/// Risk factors add at most this much, so history cannot outweigh the presentation.
const MAX_RISK: f64 = 4.0;

/// The case as the arguments give it.
#[derive(Debug, Clone, Default)]
pub struct Case {
    pub chief_complaint: String,
    pub symptoms: Vec<String>,
    pub age: Option<u32>,
    pub sex: Option<Sex>,
    pub history: Vec<String>,
}

/// What the case says about one vocabulary finding.
#[derive(Debug, Clone, Default)]
struct Mention {
    /// The clinician's own words that affirm it (first seen).
    affirmed: Option<String>,
    negated: bool,
}

/// One ranked condition.
#[derive(Debug, Clone)]
pub struct Ranked<'kb> {
    pub condition: &'kb Condition,
    pub score: f64,
    /// Share of the condition's finding weight that is present, 0–1.
    pub coverage: f64,
    pub key_features: Vec<String>,
    pub missing_features: Vec<String>,
}

/// What the matcher recognised, for the reasoning text.
#[derive(Debug, Clone, Default)]
pub struct Recognised {
    pub present: usize,
    pub absent: usize,
    /// Symptoms in which no vocabulary phrase was found.
    pub unrecognised: Vec<String>,
}

/// Lower case; letters, digits and hyphens kept, apostrophes dropped, everything else a single
/// space; padded with spaces so " phrase " matches whole words only.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(' ');
    for c in text.chars() {
        if c.is_alphanumeric() || c == '-' {
            out.extend(c.to_lowercase());
        } else if c == '\'' || c == '\u{2019}' {
            continue;
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out
}

/// Split a statement at punctuation that ends a clause, before normalising (which drops it).
fn clauses(statement: &str) -> impl Iterator<Item = &str> {
    statement
        .split([',', ';', '.', ':', '(', ')'])
        .filter(|c| !c.trim().is_empty())
}

/// Is the phrase at byte `at` of the normalised clause `text` negated?
fn negated_at(text: &str, at: usize) -> bool {
    let before: Vec<&str> = text[..at].split_whitespace().collect();
    let scope = before
        .iter()
        .rev()
        .take_while(|w| !CLAUSE_BREAKS.contains(w))
        .take(NEGATION_REACH);
    scope.into_iter().any(|w| NEGATIONS.contains(w))
}

/// Where in `text` the key's exception phrases are ("collapsed lung" for syncope), as byte ranges
/// of their words (the padding spaces left out, so a neighbouring phrase does not touch them).
fn excepted_spans(kb: &KnowledgeBase, key: &str, text: &str) -> Vec<(usize, usize)> {
    kb.exceptions
        .get(key)
        .into_iter()
        .flatten()
        .flat_map(|phrase| {
            text.match_indices(phrase.as_str())
                .map(|(at, _)| (at + 1, at + phrase.len() - 1))
        })
        .collect()
}

/// Does the padded phrase of `len` bytes at `at` share a word with an excepted span?
fn overlaps(spans: &[(usize, usize)], at: usize, len: usize) -> bool {
    let (start, end) = (at + 1, at + len - 1);
    spans.iter().any(|&(s, e)| s < end && start < e)
}

/// Every vocabulary finding the statements mention, affirmed or negated.
fn mentions(kb: &KnowledgeBase, statements: &[&str]) -> (BTreeMap<String, Mention>, Vec<usize>) {
    let mut found: BTreeMap<String, Mention> = BTreeMap::new();
    let mut hits_per_statement = vec![0; statements.len()];
    for (i, statement) in statements.iter().enumerate() {
        for clause in clauses(statement) {
            let text = normalise(clause);
            for (key, terms) in &kb.vocabulary {
                let excepted = excepted_spans(kb, key, &text);
                for term in terms {
                    for (at, _) in text.match_indices(term.as_str()) {
                        if overlaps(&excepted, at, term.len()) {
                            continue;
                        }
                        hits_per_statement[i] += 1;
                        let entry = found.entry(key.clone()).or_default();
                        if negated_at(&text, at) {
                            entry.negated = true;
                        } else if entry.affirmed.is_none() {
                            entry.affirmed = Some(statement.trim().to_string());
                        }
                    }
                }
            }
        }
    }
    (found, hits_per_statement)
}

/// Rank every condition the case fits, best first (conditions with no finding present are left
/// out, as are those the age or sex rules out).
pub fn rank<'kb>(kb: &'kb KnowledgeBase, case: &Case) -> (Vec<Ranked<'kb>>, Recognised) {
    let mut presentation: Vec<&str> = vec![case.chief_complaint.as_str()];
    presentation.extend(case.symptoms.iter().map(String::as_str));
    let (findings, hits) = mentions(kb, &presentation);
    let mut everything = presentation.clone();
    everything.extend(case.history.iter().map(String::as_str));
    let (risks, _) = mentions(kb, &everything);

    let recognised = Recognised {
        present: findings.values().filter(|m| m.affirmed.is_some()).count(),
        absent: findings
            .values()
            .filter(|m| m.affirmed.is_none() && m.negated)
            .count(),
        unrecognised: case
            .symptoms
            .iter()
            .zip(hits.iter().skip(1))
            .filter(|(_, n)| **n == 0)
            .map(|(s, _)| s.trim().to_string())
            .collect(),
    };

    let mut ranked: Vec<Ranked<'kb>> = kb
        .conditions
        .iter()
        .filter(|c| possible(c, case))
        .filter_map(|c| score(kb, c, case, &findings, &risks))
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.condition.id.cmp(&b.condition.id))
    });
    (ranked, recognised)
}

/// Age and sex can rule a condition out; when they are not given nothing is ruled out.
fn possible(condition: &Condition, case: &Case) -> bool {
    let sex_ok = match (condition.sex, case.sex) {
        (Some(only), Some(sex)) => only == sex,
        _ => true,
    };
    let age_ok = case
        .age
        .is_none_or(|age| (condition.age.min..=condition.age.max).contains(&age));
    sex_ok && age_ok
}

fn score<'kb>(
    kb: &KnowledgeBase,
    condition: &'kb Condition,
    case: &Case,
    findings: &BTreeMap<String, Mention>,
    risks: &BTreeMap<String, Mention>,
) -> Option<Ranked<'kb>> {
    let total: f64 = condition.findings.values().sum();
    let mut present = 0.0;
    let mut absent = 0.0;
    let mut key_features: Vec<String> = Vec::new();
    let mut missing_features = Vec::new();
    let mut by_weight: Vec<(&String, &f64)> = condition.findings.iter().collect();
    by_weight.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    for (key, weight) in by_weight {
        match findings.get(key) {
            Some(Mention {
                affirmed: Some(words),
                ..
            }) => {
                present += weight;
                if !key_features.contains(words) {
                    key_features.push(words.clone());
                }
            }
            Some(Mention {
                affirmed: None,
                negated: true,
            }) => {
                absent += weight;
                missing_features.push(format!("{} (stated absent)", kb.label(key)));
            }
            _ if *weight >= 2.0 => missing_features.push(kb.label(key)),
            _ => {}
        }
    }
    if present == 0.0 {
        return None;
    }
    let mut risk = 0.0;
    for (key, weight) in &condition.risk_factors {
        if let Some(Mention {
            affirmed: Some(words),
            ..
        }) = risks.get(key)
        {
            risk += weight;
            let feature = format!("risk factor: {words}");
            if !key_features.contains(words) && !key_features.contains(&feature) {
                key_features.push(feature);
            }
        }
    }
    let age_fit = match case.age {
        Some(age) if (condition.age.typical_min..=condition.age.typical_max).contains(&age) => 0.5,
        Some(_) => -0.5,
        None => 0.0,
    };
    let coverage = present / total;
    let score = present
        + 0.5 * risk.min(MAX_RISK)
        + condition.prevalence.prior()
        + age_fit
        + 2.0 * coverage
        - 0.75 * absent;
    Some(Ranked {
        condition,
        score,
        coverage,
        key_features,
        missing_features,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kb() -> KnowledgeBase {
        KnowledgeBase::embedded().unwrap()
    }

    #[test]
    fn normalising_keeps_words_and_hyphens() {
        assert_eq!(normalise("Light-headed, SOB!"), " light-headed sob ");
        assert_eq!(normalise("Murphy's sign"), " murphys sign ");
    }

    #[test]
    fn negation_reaches_within_the_clause_only() {
        let kb = kb();
        let (found, _) = mentions(
            &kb,
            &[
                "denies chest pain or fever",
                "no cough, but wheezing",
                "fever",
            ],
        );
        assert!(found["chest_pain"].negated && found["chest_pain"].affirmed.is_none());
        assert!(found["cough"].negated && found["cough"].affirmed.is_none());
        assert_eq!(
            found["wheeze"].affirmed.as_deref(),
            Some("no cough, but wheezing")
        );
        // Negated in one statement, affirmed in another: affirmed wins.
        assert_eq!(found["fever"].affirmed.as_deref(), Some("fever"));
    }

    #[test]
    fn an_exception_phrase_hides_the_finding_only_where_it_stands() {
        let kb = kb();
        let (found, _) = mentions(&kb, &["collapsed lung"]);
        assert!(!found.contains_key("syncope"), "{found:?}");
        let (found, _) = mentions(&kb, &["collapsed lung", "collapsed at home"]);
        assert!(found["syncope"].affirmed.is_some());
    }

    #[test]
    fn phrases_name_the_right_finding() {
        let kb = kb();
        let affirmed = |text: &str, key: &str| {
            mentions(&kb, &[text])
                .0
                .get(key)
                .is_some_and(|m| m.affirmed.is_some())
        };
        for (text, wrong) in [
            ("heart pounding", "unilateral_headache"),
            ("pulsating mass", "unilateral_headache"),
            ("throbbing toe", "unilateral_headache"),
            ("tearing of the eyes", "tearing_pain"),
            ("neck pain", "neck_stiffness"),
            ("sharp chest pain", "pleuritic"),
            ("left upper quadrant pain", "splenomegaly"),
            ("arm pain", "radiation_arm_jaw"),
            ("jaw pain when chewing", "radiation_arm_jaw"),
            ("temple pain", "scalp_tenderness"),
            ("stress", "band_like"),
            ("collapsed lung", "syncope"),
            ("hiv", "tb_exposure"),
            ("bilateral leg weakness", "focal_weakness"),
            ("missed insulin", "insulin"),
        ] {
            assert!(!affirmed(text, wrong), "{text:?} should not be {wrong}");
        }
        for (text, right) in [
            ("heart pounding", "palpitations"),
            ("pulsating mass", "pulsatile_mass"),
            ("throbbing headache", "unilateral_headache"),
            ("tearing chest pain", "tearing_pain"),
            ("sharp chest pain", "chest_pain"),
            ("radiates to the jaw", "radiation_arm_jaw"),
            ("jaw pain when chewing", "jaw_claudication"),
            ("temple pain", "temporal_headache"),
            ("hiv", "immunosuppression"),
        ] {
            assert!(affirmed(text, right), "{text:?} should be {right}");
        }
    }

    #[test]
    fn synonyms_find_the_same_finding() {
        let kb = kb();
        for text in [
            "shortness of breath",
            "dyspnoea",
            "breathless on exertion",
            "SOB",
        ] {
            let (found, _) = mentions(&kb, &[text]);
            assert!(
                found.get("dyspnea").is_some_and(|m| m.affirmed.is_some()),
                "{text}"
            );
        }
    }
}
