//! `search_pubmed` against a fake E-utilities server on 127.0.0.1 that serves the recorded NCBI
//! answers in `tests/fixtures/pubmed/` and records what it was sent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::*;
use crate::config::Secret;
use crate::policy::Principal;

const ESEARCH: &str = include_str!("../../../tests/fixtures/pubmed/biopython_esearch1.xml");
const ESEARCH_NONE: &str = include_str!("../../../tests/fixtures/pubmed/biopython_esearch8.xml");
/// NCBI's answer when its search backend fails: HTTP 200 with an ERROR element.
const ESEARCH_ERROR: &str = "<eSearchResult><ERROR>Search Backend failed: Exception:\n'retstart' cannot be \
    larger than 9998.</ERROR></eSearchResult>";
const EFETCH: &str = include_str!("../../../tests/fixtures/pubmed/biopython_pubmed2.xml");
const EFETCH_STRUCTURED: &str = include_str!("../../../tests/fixtures/pubmed/biopython_pubmed4.xml");
const API_KEY: &str = "test-key-0123456789";

/// The recorded esearch answer with its first PMIDs replaced by `pmids` (the articles of an efetch
/// fixture): only the articles asked for are kept from an efetch answer.
fn esearch_listing(pmids: &[&str]) -> &'static str {
    let originals = ["41282813", "41148224", "41011574", "40959146", "40937394"];
    let mut answer = ESEARCH.to_string();
    for (original, pmid) in originals.iter().zip(pmids) {
        answer = answer.replace(&format!("<Id>{original}</Id>"), &format!("<Id>{pmid}</Id>"));
    }
    Box::leak(answer.into_boxed_str())
}

/// `EFETCH`'s two articles.
fn esearch_for_efetch() -> &'static str {
    esearch_listing(&["11748933", "11700088"])
}

/// One request the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    endpoint: String,
    query: HashMap<String, String>,
    traceparent: Option<String>,
    at: Instant,
}

struct Fake {
    esearch: &'static str,
    efetch: &'static str,
    /// Statuses answered (in order) before the real bodies; then `always` if set.
    failures: Mutex<VecDeque<u16>>,
    always: Option<u16>,
    seen: Mutex<Vec<Seen>>,
}

impl Fake {
    fn new(esearch: &'static str, efetch: &'static str) -> Self {
        Self { esearch, efetch, failures: Mutex::new(VecDeque::new()), always: None, seen: Mutex::new(Vec::new()) }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self, endpoint: &str) -> usize {
        self.seen().iter().filter(|s| s.endpoint == endpoint).count()
    }
}

async fn handle(
    State(fake): State<Arc<Fake>>,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let endpoint = uri.path().rsplit('/').next().unwrap_or_default().to_string();
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(String::from);
    fake.seen.lock().unwrap().push(Seen { endpoint: endpoint.clone(), query, traceparent, at: Instant::now() });
    let planned = fake.failures.lock().unwrap().pop_front().or(fake.always);
    if let Some(status) = planned {
        let status = StatusCode::from_u16(status).unwrap();
        return (status, "<html>Service temporarily unavailable</html>").into_response();
    }
    match endpoint.as_str() {
        "esearch.fcgi" => ([("content-type", "text/xml")], fake.esearch).into_response(),
        "efetch.fcgi" => ([("content-type", "text/xml")], fake.efetch).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Serve `fake` on an ephemeral port; the base URL of its E-utilities.
async fn serve(fake: Arc<Fake>) -> String {
    let app = Router::new()
        .route("/eutils/esearch.fcgi", get(handle))
        .route("/eutils/efetch.fcgi", get(handle))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/eutils")
}

fn config(base_url: String, rate: Option<u32>) -> PubmedBackendConfig {
    PubmedBackendConfig {
        base_url,
        api_key: Some(Secret::new(API_KEY)),
        email: Some("it-ops@hospital.example".into()),
        tool: "voxgate-test".into(),
        requests_per_second: rate,
    }
}

async fn tool_for(fake: Arc<Fake>, rate: Option<u32>) -> SearchPubmed {
    SearchPubmed::new(&config(serve(fake).await, rate)).unwrap()
}

fn ctx() -> CallContext {
    CallContext { session_id: "s-1".into(), call_id: "call_1".into(), principal: Principal::new("u", vec![]) }
}

#[tokio::test]
async fn parses_fixtures_and_sends_ncbi_parameters() {
    let fake = Arc::new(Fake::new(esearch_for_efetch(), EFETCH));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let out = tool.call(json!({"query": "cryopreservation sperm", "max_results": 5}), ctx()).await.unwrap();

    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    let search = &seen[0].query;
    assert_eq!(seen[0].endpoint, "esearch.fcgi");
    assert_eq!(search["db"], "pubmed");
    assert_eq!(search["term"], "cryopreservation sperm");
    assert_eq!(search["retmax"], "5");
    assert_eq!(search["retmode"], "xml");
    assert_eq!(search["tool"], "voxgate-test");
    assert_eq!(search["email"], "it-ops@hospital.example");
    assert_eq!(search["api_key"], API_KEY);
    let fetch = &seen[1].query;
    assert_eq!(seen[1].endpoint, "efetch.fcgi");
    assert_eq!(fetch["db"], "pubmed");
    assert_eq!(fetch["retmode"], "xml");
    // Only the first `max_results` PMIDs of the 20 esearch returned are fetched, in order.
    assert_eq!(fetch["id"], "11748933,11700088,41011574,40959146,40937394");
    assert_eq!(fetch["api_key"], API_KEY);

    let result = &out.result;
    // The seed's field names: `total_count`, `publication_date`; no `count`, `total_found`, `year`.
    assert_eq!(result["total_count"], 63);
    assert!(result.get("count").is_none() && result.get("total_found").is_none());
    assert_eq!(result["articles"].as_array().unwrap().len(), 2);
    assert_eq!(result["query"], "cryopreservation sperm");
    let first = &result["articles"][0];
    assert_eq!(first["pmid"], "11748933");
    assert_eq!(first["doi"], "10.1006/cryo.2001.2328");
    assert_eq!(first["journal"], "Cryobiology");
    assert_eq!(first["publication_date"], "2001-06");
    assert!(first.get("year").is_none());
    let all_eight = ["Taddei AR", "Barbato F", "Abelli L", "Canese S", "Moretti F", "Rana KJ", "Fausto AM", "Mazzini M"];
    assert_eq!(first["authors"], json!(all_eight));
    assert!(first["title"].as_str().unwrap().starts_with("Is cryopreservation a homogeneous process?"));
    let abstract_text = first["abstract"].as_str().unwrap();
    assert!(abstract_text.chars().count() <= ABSTRACT_CHARS + 1);
    assert_eq!(first["truncated"], true);
    assert_eq!(first["url"], "https://pubmed.ncbi.nlm.nih.gov/11748933/");
    let second = &result["articles"][1];
    assert_eq!(second["pmid"], "11700088");
    assert_eq!(second["title"], "Proton MRI of (13)C distribution by J and chemical shift editing.");
    assert_eq!(second["doi"], "10.1006/jmre.2001.2429");

    assert_eq!(out.citations.len(), 2);
    let citation = &out.citations[0];
    assert_eq!(citation.source, "PubMed");
    assert_eq!(citation.url, "https://pubmed.ncbi.nlm.nih.gov/11748933/");
    assert_eq!(citation.pmid.as_deref(), Some("11748933"));
    assert_eq!(citation.doi.as_deref(), Some("10.1006/cryo.2001.2328"));
    assert_eq!(citation.date.as_deref(), Some("2001-06"));
}

#[tokio::test]
async fn structured_abstract_is_labelled_and_short_abstracts_are_not_flagged() {
    let fake = Arc::new(Fake::new(esearch_listing(&["27797938"]), EFETCH_STRUCTURED));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let out = tool.call(json!({"query": "telomere pancreatic cancer"}), ctx()).await.unwrap();
    let article = &out.result["articles"][0];
    assert_eq!(article["pmid"], "27797938");
    assert_eq!(
        article["title"],
        "Leucocyte telomere length, genetic variants at the TERT gene region and risk of pancreatic cancer."
    );
    assert!(article["abstract"].as_str().unwrap().starts_with("OBJECTIVE: Telomere shortening"));
    // 22 authors: the first AUTHORS_SHOWN, then "et al.".
    let authors = article["authors"].as_array().unwrap();
    assert_eq!(authors.len(), AUTHORS_SHOWN + 1);
    assert_eq!(authors[0], "Bao Y");
    assert_eq!(authors[AUTHORS_SHOWN], "et al.");
    assert_eq!(article["publication_date"], "2017-06");
    // Default max_results.
    assert_eq!(fake.seen()[0].query["retmax"], DEFAULT_RESULTS.to_string());
}

#[tokio::test]
async fn publication_types_and_dates_narrow_the_search() {
    let fake = Arc::new(Fake::new(ESEARCH_NONE, EFETCH));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let args = json!({
        "query": "apixaban atrial fibrillation",
        "publication_types": ["Randomized Controlled Trial", "Meta-Analysis"],
        "date_from": "2015",
    });
    tool.call(args, ctx()).await.unwrap();
    let search = &fake.seen()[0].query;
    assert_eq!(
        search["term"],
        "(apixaban atrial fibrillation) AND (\"Randomized Controlled Trial\"[pt] OR \"Meta-Analysis\"[pt])"
    );
    assert_eq!(search["datetype"], "pdat");
    assert_eq!(search["mindate"], "2015");
    assert_eq!(search["maxdate"], "3000");
}

#[tokio::test]
async fn no_results_is_an_empty_list_without_efetch() {
    let fake = Arc::new(Fake::new(ESEARCH_NONE, EFETCH));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let out = tool.call(json!({"query": "abcXYZ"}), ctx()).await.unwrap();
    assert_eq!(out.result, json!({"articles": [], "total_count": 0, "query": "abcXYZ"}));
    assert!(out.citations.is_empty());
    assert_eq!(fake.count("efetch.fcgi"), 0);
}

#[tokio::test]
async fn retries_a_503_then_succeeds() {
    let mut fake = Fake::new(esearch_for_efetch(), EFETCH);
    fake.failures = Mutex::new(VecDeque::from([503]));
    let fake = Arc::new(fake);
    let tool = tool_for(fake.clone(), Some(50)).await;
    let out = tool.call(json!({"query": "sperm motility"}), ctx()).await.unwrap();
    assert_eq!(out.result["articles"].as_array().unwrap().len(), 2);
    assert_eq!(fake.count("esearch.fcgi"), 2);
    assert_eq!(fake.count("efetch.fcgi"), 1);
}

#[tokio::test]
async fn gives_up_after_three_failures_without_leaking_url_or_key() {
    let mut fake = Fake::new(ESEARCH, EFETCH);
    fake.always = Some(503);
    let fake = Arc::new(fake);
    let tool = tool_for(fake.clone(), Some(50)).await;
    let err = tool.call(json!({"query": "sperm motility"}), ctx()).await.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    let message = err.public_message();
    assert!(message.starts_with("PubMed is unavailable"), "{message}");
    for secret in [API_KEY, "127.0.0.1", "eutils", "Service temporarily"] {
        assert!(!message.contains(secret) && !format!("{err:?}").contains(secret), "{message}");
    }
    assert_eq!(fake.count("esearch.fcgi"), crate::tools::http::MAX_ATTEMPTS as usize);
}

#[tokio::test]
async fn client_errors_and_unreadable_answers_are_not_retried() {
    let mut fake = Fake::new(ESEARCH, EFETCH);
    fake.always = Some(400);
    let fake = Arc::new(fake);
    let tool = tool_for(fake.clone(), Some(50)).await;
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    assert_eq!(fake.count("esearch.fcgi"), 1);

    let fake = Arc::new(Fake::new(ESEARCH_ERROR, EFETCH));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err, ToolError::Backend(UNREADABLE.into()));
    assert!(!err.public_message().contains("retstart"));
    assert_eq!(fake.count("esearch.fcgi"), 1);
}

#[tokio::test]
async fn efetch_answers_without_records_are_backend_errors() {
    let empty_set = "<?xml version=\"1.0\" ?>\n<PubmedArticleSet>\n</PubmedArticleSet>";
    let reported = "<eFetchResult><ERROR>Empty result - nothing todo</ERROR></eFetchResult>";
    for efetch in [reported, empty_set] {
        let fake = Arc::new(Fake::new(esearch_for_efetch(), efetch));
        let tool = tool_for(fake.clone(), Some(50)).await;
        let err = tool.call(json!({"query": "sperm motility"}), ctx()).await.unwrap_err();
        assert_eq!(err, ToolError::Backend(UNREADABLE.into()), "{efetch}");
        assert_eq!(err.code().as_str(), "backend_error");
        assert!(!err.public_message().contains("nothing todo"));
        assert_eq!(fake.count("efetch.fcgi"), 1, "not retried");
    }
    // Book records only (StatPearls chapters rank high in PubMed): an answer, with nothing to list.
    let books = "<PubmedArticleSet><PubmedBookArticle><BookDocument><PMID Version=\"1\">11748933</PMID>\
        </BookDocument></PubmedBookArticle></PubmedArticleSet>";
    let fake = Arc::new(Fake::new(esearch_for_efetch(), books));
    let tool = tool_for(fake, Some(50)).await;
    let out = tool.call(json!({"query": "sperm motility"}), ctx()).await.unwrap();
    assert_eq!(out.result["articles"], json!([]));
}

#[tokio::test]
async fn deeply_nested_answer_is_a_quick_backend_error() {
    // 480,000 nested elements (3.8 MB, under the client's 4 MiB cap) once kept a runtime worker
    // busy for minutes.
    let mut efetch = String::from("<PubmedArticleSet><PubmedArticle><MedlineCitation><Article><ArticleTitle>");
    efetch.push_str(&"<a>x".repeat(480_000));
    efetch.push_str(&"</a>".repeat(480_000));
    efetch.push_str("</ArticleTitle></Article></MedlineCitation></PubmedArticle></PubmedArticleSet>");
    let efetch: &'static str = Box::leak(efetch.into_boxed_str());
    let fake = Arc::new(Fake::new(ESEARCH, efetch));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let started = Instant::now();
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err, ToolError::Backend(UNREADABLE.into()));
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    assert_eq!(fake.count("efetch.fcgi"), 1);
}

/// An efetch article with every text field `chars` characters long.
fn long_article(pmid: &str, chars: usize) -> String {
    let long = |word: &str| word.repeat(chars / word.len());
    let authors: String = (0..3)
        .map(|_| format!("<Author><LastName>{}</LastName><Initials>AB</Initials></Author>", long("Name")))
        .collect();
    format!(
        "<PubmedArticle><MedlineCitation><PMID Version=\"1\">{pmid}</PMID><Article><Journal><JournalIssue>\
         <PubDate><Year>2024</Year></PubDate></JournalIssue><Title>{journal}</Title></Journal>\
         <ArticleTitle>{title}</ArticleTitle><Abstract><AbstractText>{abstract_text}</AbstractText></Abstract>\
         <AuthorList>{authors}</AuthorList></Article></MedlineCitation></PubmedArticle>",
        journal = long("Journal "),
        title = long("Title "),
        abstract_text = long("Abstract "),
    )
}

#[tokio::test]
async fn long_fields_are_cut_and_articles_not_asked_for_are_dropped() {
    let asked: Vec<String> = (1..=10).map(|i| format!("3000000{i:02}")).collect();
    let asked_refs: Vec<&str> = asked.iter().map(String::as_str).collect();
    let esearch = format!(
        "<eSearchResult><Count>10</Count><RetMax>10</RetMax><RetStart>0</RetStart><IdList>{}</IdList>\
         </eSearchResult>",
        asked.iter().map(|id| format!("<Id>{id}</Id>")).collect::<String>()
    );
    // Two articles nobody asked for, first in the answer, then the ten.
    let articles: String =
        ["900000001", "900000002"].iter().copied().chain(asked_refs.iter().copied()).map(|id| long_article(id, 3000)).collect();
    let efetch = format!("<PubmedArticleSet>{articles}</PubmedArticleSet>");
    let fake = Arc::new(Fake::new(Box::leak(esearch.into_boxed_str()), Box::leak(efetch.into_boxed_str())));
    let tool = tool_for(fake, Some(50)).await;
    let out = tool.call(json!({"query": "long titles"}), ctx()).await.unwrap();
    let size = out.result.to_string().len();
    assert!(size <= 30 * 1024, "{size} bytes");
    let listed = out.result["articles"].as_array().unwrap();
    let pmids: Vec<&str> = listed.iter().map(|a| a["pmid"].as_str().unwrap()).collect();
    assert!(!listed.is_empty());
    assert_eq!(pmids, asked_refs[..pmids.len()], "only the articles asked for, in esearch's order");
    for article in listed {
        assert!(article["title"].as_str().unwrap().chars().count() < 1000);
        assert!(article["journal"].as_str().unwrap().chars().count() < 1000);
        assert!(article["authors"].as_array().unwrap().iter().all(|a| a.as_str().unwrap().chars().count() < 1000));
        assert_eq!(article["truncated"], true);
    }
    assert_eq!(out.citations.len(), listed.len());
    assert!(out.citations.iter().all(|c| c.title.chars().count() < 1000));
}

#[tokio::test]
async fn unreachable_backend_is_a_backend_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let tool = SearchPubmed::new(&config(format!("http://{addr}/eutils"), Some(50))).unwrap();
    let err = tool.call(json!({"query": "x"}), ctx()).await.unwrap_err();
    assert_eq!(err, ToolError::Backend(UNAVAILABLE.into()));
}

#[tokio::test]
async fn seven_requests_at_three_per_second_take_two_seconds() {
    let fake = Arc::new(Fake::new(ESEARCH_NONE, EFETCH));
    let mut config = config(serve(fake.clone()).await, None);
    config.api_key = None; // NCBI's keyless limit: 3/s.
    let tool = Arc::new(SearchPubmed::new(&config).unwrap());
    let start = Instant::now();
    // Seven concurrent calls, as if from seven sessions sharing the one tool.
    let calls: Vec<_> = (0..7)
        .map(|i| {
            let tool = tool.clone();
            tokio::spawn(async move { tool.call(json!({"query": format!("q{i}")}), ctx()).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    let mut times: Vec<Instant> = fake.seen().iter().map(|s| s.at).collect();
    times.sort();
    assert_eq!(times.len(), 7);
    for pair in times.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(300), "{:?}", pair[1] - pair[0]);
    }
    assert!(fake.seen().iter().all(|s| !s.query.contains_key("api_key")));
}

#[tokio::test]
async fn requests_carry_traceparent_of_the_tool_span() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let subscriber = tracing_subscriber::registry().with(layer);
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = Arc::new(Fake::new(ESEARCH, EFETCH));
    let tool = tool_for(fake.clone(), Some(50)).await;
    let span = crate::telemetry::tool_span(&tracing::Span::none(), crate::telemetry::metrics::Metrics::new().tool_label("search_pubmed"), "call_1");
    let trace_id = {
        use opentelemetry::trace::TraceContextExt;
        span.context().span().span_context().trace_id().to_string()
    };
    tool.call(json!({"query": "sperm"}), ctx()).instrument(span).await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    for request in seen {
        let header = request.traceparent.expect("traceparent header");
        assert!(header.starts_with(&format!("00-{trace_id}-")), "{header}");
    }
}

#[test]
fn spec_and_schema() {
    let tool = SearchPubmed::new(&config("http://127.0.0.1:9/eutils".into(), None)).unwrap();
    let spec = tool.spec();
    assert_eq!(spec.name, "search_pubmed");
    assert_eq!(spec.category, Category::Medical);
    assert!(!spec.phi && spec.third_party && !spec.requires_confirmation);
    assert_eq!(spec.risk, Risk::Low);
    assert_eq!(spec.rate_limit_per_minute, 30);

    let validator = crate::tools::schema::compile(&spec.parameters).unwrap();
    let check = |args: Value| crate::tools::schema::check(&validator, &args);
    assert!(check(json!({"query": "statins", "max_results": 10, "date_to": "2024/06/30"})).is_ok());
    assert!(check(json!({})).is_err());
    assert!(check(json!({"query": ""})).is_err());
    assert!(check(json!({"query": "x", "max_results": 11})).is_err());
    assert!(check(json!({"query": "x", "publication_types": ["Anything"]})).is_err());
    assert!(check(json!({"query": "x", "date_from": "last year"})).is_err());
    assert!(check(json!({"query": "x", "extra": 1})).is_err());
    assert!(check(json!({"query": "x".repeat(301)})).is_err());
    assert!(SearchPubmed::new(&config("::nonsense".into(), None)).is_err());
}
