//! The LLM path of the differential: a fake chat-completions server on 127.0.0.1 answers well,
//! badly or slowly, and the knowledge base stays the floor.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;

use super::*;

/// What the fake chat-completions server answers.
#[derive(Clone)]
enum Reply {
    Content(String),
    Raw(String),
    Sleep(Duration),
}

/// Each request's `Authorization` header and body.
type Requests = Arc<Mutex<Vec<(Option<String>, Value)>>>;

#[derive(Clone)]
struct FakeLlm {
    reply: Reply,
    seen: Requests,
}

async fn completions(
    State(fake): State<FakeLlm>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> String {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    fake.seen.lock().unwrap().push((auth, body.0));
    match fake.reply {
        Reply::Content(content) => json!({"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
        .to_string(),
        Reply::Raw(raw) => raw,
        Reply::Sleep(wait) => {
            tokio::time::sleep(wait).await;
            String::new()
        }
    }
}

async fn llm_tool(reply: Reply) -> (DifferentialDiagnosis, FakeLlm) {
    llm_tool_with_budget(reply, 500).await
}

async fn llm_tool_with_budget(reply: Reply, llm_timeout_ms: u64) -> (DifferentialDiagnosis, FakeLlm) {
    let fake = FakeLlm {
        reply,
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = DdxBackendConfig {
        llm_url: Some(format!("http://{addr}/v1")),
        llm_api_key: Some(crate::config::Secret::new("llm-key")),
        llm_model: Some("clinical-model".into()),
        llm_timeout_ms,
        ..Default::default()
    };
    (tool(&config).unwrap(), fake)
}

fn seed_case() -> Value {
    json!({"chief_complaint": "chest pain", "symptoms": ["substernal chest pressure", "shortness of breath",
        "diaphoresis", "pain radiating to left arm"], "patient_age": 65, "patient_sex": "M",
        "relevant_history": ["hypertension", "diabetes", "smoking history"], "max_results": 5})
}

#[tokio::test]
async fn a_valid_llm_answer_reranks_the_candidates_and_must_not_miss_ones_are_kept() {
    let answer = json!({
        "chief_complaint": "something else",
        "diagnoses": [
            {"diagnosis": "pulmonary embolism", "probability": "medium", "key_features": ["dyspnoea"],
             "missing_features": [], "next_steps": ["CTPA"]},
            {"diagnosis": "Acute coronary syndrome (myocardial infarction or unstable angina)", "probability": "high",
             "key_features": ["pressure", "radiation"], "missing_features": [], "next_steps": ["ECG"]},
        ],
        "reasoning": "LLM explanation of the ranking.",
        "disclaimers": []
    });
    let (tool, fake) = llm_tool(Reply::Content(format!("```json\n{answer}\n```"))).await;
    let result = run(&tool, seed_case()).await;
    assert_eq!(result["reasoning"], "LLM explanation of the ranking.");
    let listed = names(&result);
    assert_eq!(
        listed[0],
        name_of("pulmonary_embolism"),
        "synonyms map to the canonical name"
    );
    assert_eq!(listed[1], name_of("acute_coronary_syndrome"));
    assert!(
        listed.contains(&name_of("aortic_dissection")),
        "a dropped must-not-miss candidate is put back"
    );
    assert_eq!(result["chief_complaint"], "chest pain");
    assert_eq!(
        result["disclaimers"][0],
        "This is not a substitute for clinical judgment"
    );

    let seen = fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer llm-key"));
    assert_eq!(body["model"], "clinical-model");
    let user = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains("candidates") && user.contains("Acute aortic dissection"),
        "{user}"
    );
}

#[tokio::test]
async fn invalid_llm_answers_fall_back_to_the_knowledge_base() {
    let invented = json!({"diagnoses": [{"diagnosis": "Costochondral lupus", "probability": "high",
        "key_features": [], "missing_features": [], "next_steps": []}], "reasoning": "x"});
    let wrong_shape = json!({"diagnoses": [{"diagnosis": "Acute aortic dissection", "probability": "certain"}], "reasoning": "x"});
    for reply in [
        Reply::Content("I think it is a heart attack.".into()),
        Reply::Content(invented.to_string()),
        Reply::Content(wrong_shape.to_string()),
        Reply::Raw("{not json".into()),
    ] {
        let (tool, fake) = llm_tool(reply).await;
        let result = run(&tool, seed_case()).await;
        assert_eq!(names(&result)[0], name_of("acute_coronary_syndrome"));
        assert_fell_back(&result);
        assert_eq!(
            fake.seen.lock().unwrap().len(),
            1,
            "an invalid answer is not retried"
        );
    }
}

#[tokio::test]
async fn a_slow_llm_is_abandoned_within_its_budget() {
    let (tool, _fake) = llm_tool(Reply::Sleep(Duration::from_secs(10))).await;
    let started = std::time::Instant::now();
    let result = run(&tool, seed_case()).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(names(&result)[0], name_of("acute_coronary_syndrome"));
    assert_fell_back(&result);
}

/// `tools.generate_differential_diagnosis.timeout_ms` shorter than `llm_timeout_ms`: the LLM
/// gets what is left of the call, so a slow one still ends in the knowledge-base answer, not in a
/// `timeout` (the call runs as the session runs it: within its deadline, cut off at it).
#[tokio::test]
async fn a_slow_llm_is_abandoned_within_a_shorter_tool_timeout() {
    let (tool, _fake) = llm_tool_with_budget(Reply::Sleep(Duration::from_secs(30)), 15_000).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    let call = crate::tools::http::within_deadline(deadline, tool.call(seed_case(), ctx()));
    let result = tokio::time::timeout_at(deadline, call)
        .await
        .expect("the call ended before the tool's timeout")
        .unwrap()
        .result;
    assert_eq!(names(&result)[0], name_of("acute_coronary_syndrome"));
    assert_fell_back(&result);
}

#[tokio::test]
async fn an_oversized_llm_answer_is_cut_to_fit_one_function_call_output() {
    // Everything the schema allows at its largest, in four-byte and escaped control characters,
    // plus fields the seed does not have: some 400 KB (under the 512 KiB read limit) that used to
    // pass straight through.
    let item = "\u{1D11E}\u{1}".repeat(100);
    let list = vec![item.clone(); 30];
    let diagnosis = |name: &str| {
        json!({"diagnosis": name, "probability": "high", "key_features": list, "missing_features": list,
               "next_steps": list, "extra": item.repeat(20)})
    };
    let answer = json!({
        "diagnoses": [diagnosis("pulmonary embolism"), diagnosis("Acute aortic dissection")],
        "reasoning": "\u{1D11E}".repeat(4000),
        "disclaimers": list,
        "notes": item.repeat(100),
    });
    let (tool, _fake) = llm_tool(Reply::Content(answer.to_string())).await;
    let result = run(&tool, seed_case()).await;
    let size = result.to_string().len();
    assert!(size <= 32 * 1024, "{size} bytes");
    assert_eq!(result["truncated"], true);
    assert!(result.get("notes").is_none() && result["diagnoses"][0].get("extra").is_none());
    assert_eq!(names(&result)[0], name_of("pulmonary_embolism"), "the LLM's ranking is kept");
    assert!(names(&result).contains(&name_of("acute_coronary_syndrome")), "must-not-miss ones are put back");
    assert!(result["reasoning"].as_str().unwrap().chars().count() <= 1501);
    assert!(!result["reasoning"].as_str().unwrap().contains("unavailable"));
    assert_eq!(result["disclaimers"][0], "This is not a substitute for clinical judgment");
}

/// The knowledge base's answer, saying the re-ranking service could not be used.
fn assert_fell_back(result: &serde_json::Value) {
    let reasoning = result["reasoning"].as_str().unwrap();
    assert!(reasoning.contains("re-ranking service was unavailable"), "{reasoning}");
}

/// An oversized knowledge-base answer loses the quotes of the case's own words, not the closing
/// sentences: the must-not-miss conditions, their red flags (said nowhere else) and the note that
/// the re-ranking service was unavailable.
#[tokio::test]
async fn a_cut_reasoning_keeps_the_red_flags_and_the_fallback_note() {
    // Statements it recognises, quoted whole as the leader's key features, and ones it does not,
    // listed whole, in control characters (six bytes each once escaped).
    let pad = "\u{1}".repeat(170);
    let mut symptoms: Vec<String> = ["substernal chest pressure", "shortness of breath", "diaphoresis", "pain radiating to left arm"]
        .iter()
        .map(|s| format!("{s} {pad}"))
        .collect();
    symptoms.extend((0..26).map(|n| format!("qq{n} {}", "\u{1}".repeat(190))));
    let history: Vec<String> =
        ["hypertension", "smoker", "diabetes", "high cholesterol"].iter().map(|s| format!("{s} {pad}")).collect();
    let args = json!({"chief_complaint": "chest pain", "symptoms": symptoms, "relevant_history": history,
        "patient_age": 65, "patient_sex": "M"});
    let (tool, _fake) = llm_tool(Reply::Raw("{not json".into())).await;
    for (result, fell_back) in [(run(&tool, args.clone()).await, true), (run(&kb_tool(), args).await, false)] {
        assert!(result.to_string().len() <= crate::tools::text::MAX_RESULT_BYTES);
        assert_eq!(names(&result)[0], name_of("acute_coronary_syndrome"));
        let reasoning = result["reasoning"].as_str().unwrap();
        assert!(reasoning.chars().count() <= 1501, "{}", reasoning.chars().count());
        assert!(reasoning.starts_with("Ranked by") != fell_back, "{reasoning}");
        assert!(reasoning.contains("Must not miss: ") && reasoning.contains("Red flags to check: "), "{reasoning}");
        if fell_back {
            assert_fell_back(&result);
        }
    }
}
