//! Unit tests of `search_medical_guidelines`: the corpus checks (a bad line is named), the shipped
//! corpus, filters, the result schema and citations, truncation, relevance ([`relevance`]) and the
//! corpus content against the review rules ([`content`]).

mod content;
mod relevance;

use std::sync::{Arc, LazyLock};

use serde_json::{Value, json};

use super::corpus::{self, CorpusError, Guideline};
use super::index::Filters;
use super::{MAX_RESULT_BYTES, SearchGuidelines};
use crate::config::GuidelinesBackendConfig;
use crate::policy::Principal;
use crate::tools::{CallContext, Tool};

/// The shipped corpus, indexed once for every test of this binary.
static SHIPPED: LazyLock<Arc<SearchGuidelines>> =
    LazyLock::new(|| Arc::new(super::tool(&GuidelinesBackendConfig::default()).unwrap()));

fn shipped_index() -> Arc<SearchGuidelines> {
    SHIPPED.clone()
}

impl SearchGuidelines {
    /// The ids of the best `n` guidelines for `query`, without filters.
    fn top_ids(&self, query: &str, n: usize) -> Vec<String> {
        let hits = self.index.search(query, &Filters::default(), n).unwrap();
        hits.ranked.iter().map(|&at| self.guidelines[at].id.clone()).collect()
    }
}

fn ctx() -> CallContext {
    CallContext {
        session_id: "sess_test".into(),
        call_id: "call_test".into(),
        principal: Principal::new("tester", vec!["clinician".into()]),
    }
}

async fn call(tool: &SearchGuidelines, args: Value) -> crate::tools::ToolOutput {
    tool.call(args, ctx()).await.unwrap()
}

/// A valid corpus line with one field replaced.
fn line_with(field: &str, value: Value) -> String {
    let mut record = json!({
        "id": "test-1", "title": "Test guideline", "source": "CDC", "condition": "Testing",
        "summary": "A summary.", "url": "https://www.cdc.gov/test.html", "publication_date": "2020-01-02",
        "last_updated": "2021-03-04", "text": "Body text.",
    });
    record[field] = value;
    record.to_string()
}

#[test]
fn the_shipped_corpus_is_valid_and_large_enough() {
    let guidelines = corpus::shipped().unwrap();
    assert!(guidelines.len() >= 60, "{} records", guidelines.len());
    let federal =
        ["USPSTF", "CDC", "CDC/ACIP", "CDC/NTCA", "CDC/HICPAC", "NIH/NHLBI", "NIH/NIDDK", "AHRQ", "FDA", "VA/DoD"];
    for g in &guidelines {
        assert!(federal.contains(&g.source.as_str()), "{}: {}", g.id, g.source);
        assert!(g.url.starts_with("https://www."), "{}: {}", g.id, g.url);
        assert!(!g.recommendations.is_empty(), "{} has no recommendations", g.id);
    }
}

#[test]
fn a_bad_record_names_the_line_and_the_field() {
    let good = line_with("id", json!("ok-1"));
    let cases = [
        (line_with("url", json!("not a url")), "field `url`"),
        (line_with("publication_date", json!("March 2020")), "field `publication_date`"),
        (line_with("last_updated", json!("2019-01-01")), "field `last_updated`"),
        (line_with("title", json!("   ")), "field `title`"),
        (line_with("summary", json!(42)), "summary"),
        (line_with("id", json!("has spaces")), "field `id`"),
        (line_with("recommendations", json!(["fine", ""])), "field `recommendations`"),
        (line_with("surprise", json!("x")), "unknown field `surprise`"),
        ("{\"id\": \"broken\"".to_string(), "line 3"),
    ];
    for (bad, expected) in cases {
        let text = format!("{good}\n\n{bad}\n");
        let err = corpus::parse(&text, "/srv/corpus.jsonl").unwrap_err().to_string();
        assert!(err.starts_with("/srv/corpus.jsonl line 3: "), "{err}");
        assert!(err.contains(expected), "{expected:?} not in {err}");
    }
    let missing = line_with("id", json!("ok-2")).replace("\"url\"", "\"link\"");
    let err = corpus::parse(&missing, "c.jsonl").unwrap_err().to_string();
    assert!(err.contains("line 1") && err.contains("link"), "{err}");
}

#[test]
fn duplicate_ids_and_empty_files_are_refused() {
    let line = line_with("id", json!("same"));
    let err = corpus::parse(&format!("{line}\n{line}\n"), "c.jsonl").unwrap_err();
    assert_eq!(err.to_string(), "c.jsonl line 2: field `id`: `same` is already used on line 1");
    assert_eq!(corpus::parse("\n \n", "c.jsonl").unwrap_err(), CorpusError::Empty { origin: "c.jsonl".into() });
    let err = corpus::from_file(std::path::Path::new("/nonexistent/corpus.jsonl")).unwrap_err();
    assert!(matches!(err, CorpusError::Unreadable { .. }), "{err}");
}

#[test]
fn an_operator_corpus_replaces_the_shipped_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.jsonl");
    let own = line_with("title", json!("Local protocol for heparin-induced thrombocytopenia"));
    std::fs::write(&path, format!("{own}\n")).unwrap();
    let tool = super::tool(&GuidelinesBackendConfig { corpus_path: Some(path.clone()) }).unwrap();
    assert_eq!(tool.top_ids("heparin thrombocytopenia", 5), vec!["test-1"]);
    assert!(tool.top_ids("colorectal cancer screening", 5).is_empty());
    assert_eq!(super::check_corpus(&path), Ok(1));
}

#[tokio::test]
async fn results_have_the_seed_fields_and_citations() {
    let tool = shipped_index();
    let out = call(&tool, json!({"query": "colorectal cancer screening", "max_results": 3})).await;
    let result = &out.result;
    assert_eq!(result["query"], "colorectal cancer screening");
    assert!(result["total_count"].as_u64().unwrap() >= 3);
    assert!(result.get("truncated").is_none());
    let list = result["guidelines"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    let first = &list[0];
    assert_eq!(first["id"], "uspstf-colorectal-cancer-screening");
    for field in ["id", "title", "source", "condition", "summary", "url", "publication_date", "last_updated"] {
        assert!(first[field].as_str().is_some_and(|s| !s.is_empty()), "{field} missing: {first}");
    }
    assert!(first.get("text").is_none(), "the searched body is not returned");
    assert!(first["recommendations"].as_array().is_some_and(|r| !r.is_empty()));
    assert_eq!(out.citations.len(), 3);
    let citation = &out.citations[0];
    assert_eq!(citation.title, first["title"].as_str().unwrap());
    assert_eq!(
        citation.url,
        "https://www.uspreventiveservicestaskforce.org/uspstf/recommendation/colorectal-cancer-screening"
    );
    assert_eq!(citation.source, "USPSTF");
    assert_eq!(citation.date.as_deref(), Some("2021-05-18"));
    assert!(citation.evidence_level.as_deref().is_some_and(|l| l.contains("grade A")));
}

#[tokio::test]
async fn the_default_is_ten_results_best_first() {
    let out = call(&shipped_index(), json!({"query": "vaccine"})).await;
    assert_eq!(out.result["guidelines"].as_array().unwrap().len(), 10);
    assert!(out.result["total_count"].as_u64().unwrap() > 10);
}

/// 3.0 passes the schema's "integer": it is 3, not "absent" (the default of ten).
#[tokio::test]
async fn a_whole_number_float_is_the_count() {
    let out = call(&shipped_index(), json!({"query": "vaccine", "max_results": 3.0})).await;
    assert_eq!(out.result["guidelines"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn the_source_filter_keeps_one_organisation() {
    let tool = shipped_index();
    let out = call(&tool, json!({"query": "screening", "guideline_source": "cdc", "max_results": 20})).await;
    let list = out.result["guidelines"].as_array().unwrap();
    assert!(!list.is_empty());
    for g in list {
        assert!(g["source"].as_str().unwrap().split('/').any(|s| s == "CDC"), "{}", g["source"]);
    }
    // Every word of the filter must be a word of the source: "acip" finds the CDC/ACIP records only.
    let out = call(&tool, json!({"query": "vaccine", "guideline_source": "ACIP", "max_results": 20})).await;
    let sources: Vec<&str> =
        out.result["guidelines"].as_array().unwrap().iter().map(|g| g["source"].as_str().unwrap()).collect();
    assert!(!sources.is_empty() && sources.iter().all(|s| *s == "CDC/ACIP"), "{sources:?}");
    assert_eq!(out.result["total_count"], sources.len());
    // An organisation the corpus does not have gives no results, not someone else's.
    let out = call(&tool, json!({"query": "hypertension", "guideline_source": "who"})).await;
    assert_eq!(out.result["total_count"], 0);
    assert_eq!(out.result["guidelines"], json!([]));
    assert!(out.citations.is_empty());
}

#[tokio::test]
async fn the_condition_filter_matches_condition_words_with_stemming() {
    let tool = shipped_index();
    let out = call(&tool, json!({"query": "screening", "condition": "Diabetes", "max_results": 20})).await;
    let conditions: Vec<String> = out.result["guidelines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["condition"].as_str().unwrap().to_lowercase())
        .collect();
    assert!(conditions.len() >= 2, "{conditions:?}");
    assert!(conditions.iter().all(|c| c.contains("diabet")), "{conditions:?}");
    // Both filters together, and a query of stop words only: the filtered records, in corpus order.
    let out = call(&tool, json!({"query": "the", "guideline_source": "uspstf", "condition": "syphilis"})).await;
    let ids: Vec<&str> =
        out.result["guidelines"].as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["uspstf-syphilis-pregnancy-screening", "uspstf-syphilis-screening-nonpregnant"]);
}

#[tokio::test]
async fn query_syntax_never_errors() {
    let tool = shipped_index();
    for query in ["title:(sepsis", "\"heart failure", "AND OR NOT", "a*b?c~2 ^3", "[1 TO 5}", "-+&&||!(){}", "💊"] {
        let out = tool.call(json!({"query": query}), ctx()).await;
        assert!(out.is_ok(), "{query}: {out:?}");
    }
    let out = call(&tool, json!({"query": "what do the guidelines say about"})).await;
    assert_eq!(out.result["total_count"], 0, "framing words alone match nothing");
}

#[test]
fn long_results_are_truncated_under_the_limit() {
    let long = "word ".repeat(2_000);
    let records: Vec<String> = (0..20)
        .map(|i| {
            let mut record: Value = serde_json::from_str(&line_with("id", json!(format!("long-{i}")))).unwrap();
            record["summary"] = json!(format!("aspirin {long}").chars().take(3_900).collect::<String>());
            record["recommendations"] =
                json!(vec![format!("aspirin {long}").chars().take(1_900).collect::<String>(); 10]);
            record.to_string()
        })
        .collect();
    let guidelines: Vec<Guideline> = corpus::parse(&records.join("\n"), "long.jsonl").unwrap();
    let tool = SearchGuidelines::new(guidelines).unwrap();
    let out = tool.search(&json!({"query": "aspirin", "max_results": 20})).unwrap();
    let size = out.result.to_string().len();
    assert!(size <= MAX_RESULT_BYTES, "{size} bytes");
    assert_eq!(out.result["truncated"], true);
    assert_eq!(out.result["total_count"], 20);
    let list = out.result["guidelines"].as_array().unwrap();
    assert!(!list.is_empty() && list.len() <= 20);
    assert_eq!(out.citations.len(), list.len(), "one citation per returned guideline");
    assert!(list[0]["summary"].as_str().unwrap().ends_with('…'));
}

#[test]
fn the_index_builds_fast() {
    let guidelines = corpus::shipped().unwrap();
    let started = std::time::Instant::now();
    let tool = SearchGuidelines::new(guidelines).unwrap();
    let built = started.elapsed();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        tool.top_ids("anticoagulation in atrial fibrillation", 10);
    }
    let per_search = started.elapsed() / 100;
    eprintln!("guideline index: built in {built:?}, {per_search:?} per search");
    // Generous bounds for a debug build on a loaded 2-core CI machine.
    assert!(built < std::time::Duration::from_secs(5), "{built:?}");
    assert!(per_search < std::time::Duration::from_millis(50), "{per_search:?}");
}

#[test]
fn the_spec_matches_tools_md() {
    let tool = shipped_index();
    let spec = tool.spec();
    assert_eq!(spec.name, "search_medical_guidelines");
    assert_eq!(spec.category, crate::tools::Category::Medical);
    assert!(!spec.phi && !spec.third_party && !spec.requires_confirmation);
    assert_eq!(spec.rate_limit_per_minute, 30);
    let validator = crate::tools::schema::compile(&spec.parameters).unwrap();
    assert!(
        crate::tools::schema::check(
            &validator,
            &json!({"query": "asthma", "condition": "asthma", "guideline_source": "nhlbi", "max_results": 5})
        )
        .is_ok()
    );
    for bad in [
        json!({}),
        json!({"query": ""}),
        json!({"query": "x".repeat(301)}),
        json!({"query": "a", "max_results": 0}),
        json!({"query": "a", "max_results": 21}),
        json!({"query": "a", "extra": 1}),
    ] {
        assert!(crate::tools::schema::check(&validator, &bad).is_err(), "{bad}");
    }
}
