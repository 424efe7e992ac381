//! `search_openevidence` against a fake evidence adapter on 127.0.0.1 speaking the CONTRACT §8
//! protocol, recording what it was sent.

use serde_json::{Value, json};

use super::*;
use crate::tools::test_support::{FakeHttp, ctx};

fn answer() -> Value {
    json!({
        "results": [
            {"title": "Beta-blockers for heart failure with reduced ejection fraction", "summary": "Meta-analysis: beta-blockers reduce all-cause mortality in HFrEF.",
             "evidence_level": "High", "source": "Lancet", "pubmed_id": 24950843, "url": "https://pubmed.ncbi.nlm.nih.gov/24950843/", "date": "2014-06-19"},
            {"title": "Beta-blockers in HFpEF", "summary": "Observational data; no clear mortality benefit.",
             "evidence_level": "low", "source": "JACC", "pubmed_id": null, "url": "https://example.org/hfpef", "date": null},
            {"title": "No link", "summary": "dropped: not a web URL", "evidence_level": "moderate", "source": "x", "url": "javascript:alert(1)"},
        ],
        "total_count": 42
    })
}

async fn start(body: String, failures: Vec<u16>) -> (std::sync::Arc<FakeHttp>, SearchEvidence) {
    let failures = failures.into_iter().map(|status| (status, None)).collect();
    let (fake, base) = crate::tools::test_support::start(body, failures).await;
    let config = EvidenceBackendConfig {
        base_url: Some(format!("{base}/adapter/v1")),
        api_key: Some(Secret::new("evidence-key")),
    };
    (fake, tool(&config).unwrap().unwrap())
}

#[tokio::test]
async fn the_adapter_protocol_is_spoken_and_results_keep_the_seed_fields() {
    let (fake, tool) = start(answer().to_string(), vec![]).await;
    let out = tool
        .call(
            json!({"query": "beta blockers in heart failure", "max_results": 3}),
            ctx(),
        )
        .await
        .unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/adapter/v1/search");
    assert_eq!(seen[0].query["q"], "beta blockers in heart failure");
    assert_eq!(seen[0].query["limit"], "3");
    assert!(!seen[0].query.contains_key("evidence_level"));
    assert_eq!(seen[0].header("authorization"), Some("Bearer evidence-key"));

    let result = &out.result;
    assert_eq!(result["total_count"], 42);
    assert_eq!(result["query"], "beta blockers in heart failure");
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "the result without a web URL is dropped");
    assert_eq!(
        results[0],
        json!({"title": "Beta-blockers for heart failure with reduced ejection fraction",
            "summary": "Meta-analysis: beta-blockers reduce all-cause mortality in HFrEF.", "evidence_level": "high",
            "source": "Lancet", "pubmed_id": "24950843", "url": "https://pubmed.ncbi.nlm.nih.gov/24950843/", "date": "2014-06-19"})
    );
    assert_eq!(results[1]["pubmed_id"], Value::Null);

    assert_eq!(out.citations.len(), 2);
    let citation = &out.citations[0];
    assert_eq!(citation.pmid.as_deref(), Some("24950843"));
    assert_eq!(citation.evidence_level.as_deref(), Some("high"));
    assert_eq!(citation.source, "Lancet");
    assert_eq!(citation.date.as_deref(), Some("2014-06-19"));
}

#[tokio::test]
async fn the_evidence_level_filter_is_sent_and_enforced() {
    let (fake, tool) = start(answer().to_string(), vec![]).await;
    let out = tool
        .call(
            json!({"query": "beta blockers", "evidence_level": "high"}),
            ctx(),
        )
        .await
        .unwrap();
    assert_eq!(fake.seen()[0].query["evidence_level"], "high");
    let results = out.result["results"].as_array().unwrap();
    assert_eq!(
        results.len(),
        1,
        "a service that ignores the filter cannot widen it"
    );
    assert_eq!(results[0]["evidence_level"], "high");
}

#[tokio::test]
async fn failures_are_retried_then_reported_without_internals() {
    let (fake, tool) = start(answer().to_string(), vec![502]).await;
    assert!(tool.call(json!({"query": "x"}), ctx()).await.is_ok());
    assert_eq!(fake.seen().len(), 2);

    // Failing every attempt (the first and three retries) gives up.
    let (_fake, tool) = start(answer().to_string(), vec![500; crate::tools::http::MAX_ATTEMPTS as usize]).await;
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    assert!(
        err.public_message().contains("search_pubmed") && !err.public_message().contains("db-7")
    );

    let (_fake, tool) = start("{\"answer\": \"not the protocol\"}".into(), vec![]).await;
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err.public_message(), UNREADABLE);
}

#[test]
fn not_offered_unless_configured_and_declared_third_party() {
    assert!(tool(&EvidenceBackendConfig::default()).unwrap().is_none());
    let config = EvidenceBackendConfig {
        base_url: Some("http://127.0.0.1:1".into()),
        api_key: None,
    };
    let tool = tool(&config).unwrap().unwrap();
    assert!(tool.spec().third_party && !tool.spec().phi);
    let validator = crate::tools::schema::compile(&parameters()).unwrap();
    assert!(
        crate::tools::schema::check(
            &validator,
            &json!({"query": "x", "evidence_level": "certain"})
        )
        .is_err()
    );
}

#[tokio::test]
async fn an_oversized_answer_is_cut_to_fit_one_function_call_output() {
    // Every field far too long, in four-byte characters (a character cut counts them as one) and
    // control characters (escaped to six bytes each); one URL too long to be a usable link. The
    // whole answer stays under the 2 MiB read limit.
    let wide = |n: usize| "\u{1D11E}\u{1}".repeat(n);
    let item = |n: usize| {
        json!({"title": wide(3_000), "summary": wide(3_000), "evidence_level": "high", "source": wide(3_000),
               "pubmed_id": wide(1_000), "url": format!("https://example.org/{n}"), "date": wide(1_000)})
    };
    let mut results: Vec<Value> = (0..10).map(item).collect();
    results[0]["url"] = json!(format!("https://example.org/{}", "a".repeat(5_000)));
    let (_fake, tool) = start(json!({"results": results, "total_count": 10}).to_string(), vec![]).await;
    let out = tool.call(json!({"query": "beta blockers", "max_results": 10}), ctx()).await.unwrap();
    let size = out.result.to_string().len();
    assert!(size <= 32 * 1024, "{size} bytes");
    assert_eq!(out.result["truncated"], true, "results were dropped to fit");
    let listed = out.result["results"].as_array().unwrap();
    assert!(!listed.is_empty());
    assert_eq!(listed[0]["url"], "https://example.org/1", "the overlong URL's result is left out");
    for result in listed {
        assert_eq!(result["truncated"], true);
        assert!(result["title"].as_str().unwrap().chars().count() <= TITLE_CHARS + 1);
        assert!(result["date"].as_str().unwrap().chars().count() <= DATE_CHARS + 1);
    }
    assert_eq!(out.citations.len(), listed.len());
    assert!(out.citations.iter().all(|c| c.title.len() <= 4 * TITLE_CHARS + 3));
}

/// The docs: a result without a title or URL is dropped, not the answer. Missing, `null` or
/// mistyped fields in one result must not fail the whole call.
#[tokio::test]
async fn an_incomplete_result_is_skipped_not_the_whole_answer() {
    let body = json!({
        "results": [
            {"title": "x", "source": null},
            {"title": "No URL", "summary": null, "url": null},
            {"title": 7, "url": "https://example.org/7"},
            "not an object",
            {"title": "Good", "summary": null, "evidence_level": null, "source": null, "pubmed_id": null,
             "url": "https://example.org/good", "date": null},
        ],
        "total_count": null
    });
    let (_fake, tool) = start(body.to_string(), vec![]).await;
    let out = tool.call(json!({"query": "x"}), ctx()).await.unwrap();
    let results = out.result["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        results[0],
        json!({"title": "Good", "summary": "", "evidence_level": "unknown", "source": "",
               "pubmed_id": null, "url": "https://example.org/good", "date": null})
    );
    assert_eq!(out.result["total_count"], 5);
    assert_eq!(out.citations.len(), 1);
}
