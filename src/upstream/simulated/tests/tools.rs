//! Tool calls of the simulated model: each rule gives the right `function_call` events with
//! arguments valid for the declared schema, and tool outputs are answered in words.

use serde_json::{Value, json};

use super::{Client, joined, types};
use crate::tools::Tool;
use crate::tools::calculators;

/// Tool definitions as voxgate declares them: the real calculator tool, and the calendar and PubMed
/// argument schemas of TOOLS.md.
fn tools() -> Value {
    let calculator = calculators::tool();
    let spec = calculator.spec();
    json!([
        {"type": "function", "name": spec.name, "description": "calculators", "parameters": spec.parameters},
        {"type": "function", "name": "get_calendar_events", "parameters": calendar_query_schema()},
        {"type": "function", "name": "create_calendar_event", "parameters": calendar_create_schema()},
        {"type": "function", "name": "search_pubmed", "parameters": pubmed_schema()},
    ])
}

fn calendar_query_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["start_date", "end_date"], "properties": {
        "start_date": {"type": "string", "format": "date", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "end_date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "calendar_name": {"type": "string", "maxLength": 100},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 200}}})
}

fn calendar_create_schema() -> Value {
    let stamp = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$";
    json!({"type": "object", "additionalProperties": false, "required": ["title", "start_datetime", "end_datetime"],
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "start_datetime": {"type": "string", "pattern": stamp},
            "end_datetime": {"type": "string", "pattern": stamp},
            "location": {"type": "string", "maxLength": 200},
            "calendar_name": {"type": "string", "maxLength": 100}}})
}

pub(super) fn pubmed_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["query"], "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 300},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 20}}})
}

/// Ask for `text` and return the function calls of the response (name, call_id, parsed arguments),
/// after checking the call events and that the arguments satisfy the declared schema.
async fn calls_for(client: &mut Client, text: &str) -> Vec<(String, String, Value)> {
    client.say(text).await;
    let events = client.respond().await;
    let done = events.last().expect("response.done");
    assert_eq!(done["response"]["status"], "completed");
    let declared = tools();
    let mut calls = Vec::new();
    for item in done["response"]["output"].as_array().expect("output") {
        assert_eq!(item["type"], "function_call", "{item}");
        let call_id = item["call_id"].as_str().expect("call_id").to_string();
        let name = item["name"].as_str().expect("name").to_string();
        let mine: Vec<&Value> = events
            .iter()
            .filter(|e| e["call_id"] == call_id.as_str() || e["item"]["call_id"] == call_id.as_str())
            .collect();
        let kinds = types(&mine.iter().map(|e| (*e).clone()).collect::<Vec<_>>()).join(",");
        assert!(
            kinds.starts_with(
                "response.output_item.added,conversation.item.added,response.function_call_arguments.delta"
            ),
            "{kinds}"
        );
        assert!(
            kinds.ends_with("response.function_call_arguments.done,conversation.item.done,response.output_item.done"),
            "{kinds}"
        );
        let added = mine[0];
        assert_eq!(added["item"]["status"], "in_progress");
        assert_eq!(added["item"]["arguments"], "");
        let deltas: String = mine.iter().filter_map(|e| e["delta"].as_str()).collect();
        let arguments = item["arguments"].as_str().expect("arguments");
        assert_eq!(deltas, arguments, "deltas add up to the arguments");
        assert!((2..=3).contains(&mine.iter().filter(|e| e["delta"].is_string()).count()));
        let arguments: Value = serde_json::from_str(arguments).expect("arguments are JSON");
        let schema = declared.as_array().expect("tools").iter().find(|t| t["name"] == name.as_str()).expect("declared");
        let validator = crate::tools::schema::compile(&schema["parameters"]).expect("schema");
        crate::tools::schema::check(&validator, &arguments).unwrap_or_else(|err| panic!("{name} {arguments}: {err:?}"));
        calls.push((name, call_id, arguments));
    }
    calls
}

fn today() -> chrono::NaiveDate {
    chrono::Utc::now().date_naive()
}

#[tokio::test]
async fn calendar_query_calls_get_calendar_events() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "What's on my calendar tomorrow?").await;
    let tomorrow = (today() + chrono::Days::new(1)).format("%Y-%m-%d").to_string();
    assert_eq!(calls[0].0, "get_calendar_events");
    assert_eq!(calls[0].2, json!({"start_date": tomorrow, "end_date": tomorrow}));
}

#[tokio::test]
async fn booking_calls_create_calendar_event_fitted_to_the_schema() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "Book a meeting with Dr. Smith at 2pm tomorrow about the audit").await;
    let day = (today() + chrono::Days::new(1)).format("%Y-%m-%d").to_string();
    assert_eq!(calls[0].0, "create_calendar_event");
    // The declared schema has no `description`: it is dropped, as a model would.
    assert_eq!(
        calls[0].2,
        json!({"title": "Meeting with Dr. Smith", "start_datetime": format!("{day}T14:00:00"), "end_datetime": format!("{day}T15:00:00")})
    );
}

#[tokio::test]
async fn calculator_requests_compute_with_the_real_tool() {
    let mut client = Client::with_tools(tools()).await;
    let calculator = calculators::tool();
    let cases = [
        ("Calculate the BMI for 70 kg and 175 cm", "bmi", json!(22.9)),
        ("Run the Wells DVT example", "wells_dvt", json!(5)),
        ("CHA2DS2-VASc for a 72 year old woman with hypertension", "chadsvasc", json!(3)),
    ];
    for (text, calculator_name, score) in cases {
        let calls = calls_for(&mut client, text).await;
        assert_eq!(calls[0].0, "calculate_medical_score");
        assert_eq!(calls[0].2["calculator_name"], calculator_name);
        let result = calculator.evaluate(&calls[0].2).expect("the calculator accepts the arguments");
        assert_eq!(result["score"], score, "{text}: {result}");
        // Answer the call so the next request starts a fresh turn.
        let output = json!({"type": "function_call_output", "call_id": calls[0].1, "output": result.to_string()});
        client.send(json!({"type": "conversation.item.create", "item": output})).await;
        client.until("conversation.item.done").await;
        client.respond().await;
    }
}

#[tokio::test]
async fn pubmed_request_calls_search_pubmed() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "Find recent PubMed articles on lactate clearance in sepsis").await;
    assert_eq!(calls[0].0, "search_pubmed");
    assert_eq!(calls[0].2, json!({"query": "lactate clearance in sepsis", "max_results": 5}));
}

#[tokio::test]
async fn two_requests_make_two_calls_in_one_response() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "What is on my calendar today and also search PubMed for sepsis lactate").await;
    let names: Vec<&str> = calls.iter().map(|(name, _, _)| name.as_str()).collect();
    assert_eq!(names, ["get_calendar_events", "search_pubmed"]);
    assert_ne!(calls[0].1, calls[1].1);
}

#[tokio::test]
async fn a_tool_output_is_answered_in_words() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "Calculate the BMI for 70 kg and 175 cm").await;
    let output = calculators::tool().evaluate(&calls[0].2).expect("computed");
    let item = json!({"type": "function_call_output", "call_id": calls[0].1, "output": output.to_string()});
    client.send(json!({"type": "conversation.item.create", "event_id": "o1", "item": item})).await;
    let added = client.next().await;
    assert_eq!(added["type"], "conversation.item.added");
    assert_eq!(added["item"]["type"], "function_call_output");
    assert!(added["previous_item_id"].as_str().is_some_and(|id| id.starts_with("item_")));
    assert_eq!(client.next().await["type"], "conversation.item.done");
    let events = client.respond().await;
    assert_eq!(joined(&events, "response.output_audio_transcript.delta"), "The BMI is 22.9 (normal weight).");

    let declined = json!({"error": {"code": "user_declined", "message": "declined"}});
    let calls = calls_for(&mut client, "Book a meeting at 9am tomorrow").await;
    let item = json!({"type": "function_call_output", "call_id": calls[0].1, "output": declined.to_string()});
    client.send(json!({"type": "conversation.item.create", "item": item})).await;
    client.until("conversation.item.done").await;
    let events = client.respond().await;
    assert_eq!(joined(&events, "response.output_audio_transcript.delta"), "The event was not created: you declined.");
}

/// A barge-in cancelled the answer to an output, then the user asked again: the new question is
/// answered (here, with a new call), not the old output (the soak's "silent session").
#[tokio::test]
async fn an_output_spoken_over_by_a_new_question_is_not_answered() {
    let mut client = Client::with_tools(tools()).await;
    let calls = calls_for(&mut client, "Calculate the BMI for 70 kg and 175 cm").await;
    let output = calculators::tool().evaluate(&calls[0].2).expect("computed");
    let item = json!({"type": "function_call_output", "call_id": calls[0].1, "output": output.to_string()});
    client.send(json!({"type": "conversation.item.create", "item": item})).await;
    client.until("conversation.item.done").await;
    client.send(json!({"type": "response.create"})).await;
    client.until("response.created").await;
    client.send(json!({"type": "response.cancel"})).await;
    let cancelled = client.until("response.done").await;
    assert_eq!(cancelled.last().expect("done")["response"]["status"], "cancelled");
    client.until("rate_limits.updated").await;

    let again = calls_for(&mut client, "Calculate the BMI for 70 kg and 175 cm").await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "calculate_medical_score");
    assert_ne!(again[0].1, calls[0].1, "a new call, not the old result");
}

/// The real calendar tools behind the simulated model: book, then list, each answered in words.
#[tokio::test]
async fn real_calendar_tools_accept_the_calls_and_results_are_spoken() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend =
        crate::tools::calendar::LocalCalendar::open(dir.path().join("calendar.ics"), chrono_tz::UTC).expect("calendar");
    let calendar = crate::tools::calendar::tools_with_backend(std::sync::Arc::new(backend));
    let definitions: Vec<Value> = calendar
        .iter()
        .map(|tool| json!({"type": "function", "name": tool.spec().name, "parameters": tool.spec().parameters}))
        .collect();
    let mut client = Client::with_tools(json!(definitions)).await;
    let context = |call_id: &str| crate::tools::CallContext {
        session_id: "sess_test".into(),
        call_id: call_id.into(),
        principal: crate::policy::Principal::new("tester", vec![]),
    };
    let run = |name: &str, arguments: Value, call_id: String| {
        let tool = calendar.iter().find(|tool| tool.spec().name == name).expect("tool").clone();
        let context = context(&call_id);
        async move { tool.call(arguments, context).await.expect("the tool accepts the arguments").result }
    };

    client.say("Create an event called Budget review at 14:00 on 2030-12-02").await;
    let events = client.respond().await;
    let call = &events.last().expect("done")["response"]["output"][0];
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("json");
    let call_id = call["call_id"].as_str().expect("call_id").to_string();
    let result = run("create_calendar_event", arguments, call_id.clone()).await;
    let item = json!({"type": "function_call_output", "call_id": call_id, "output": result.to_string()});
    client.send(json!({"type": "conversation.item.create", "item": item})).await;
    client.until("conversation.item.done").await;
    let spoken = joined(&client.respond().await, "response.output_audio_transcript.delta");
    assert_eq!(spoken, "I created the event \"Budget review\" on 2030-12-02 at 14:00.", "{result}");

    client.say("What is on my calendar on 2030-12-02?").await;
    let events = client.respond().await;
    let call = &events.last().expect("done")["response"]["output"][0];
    assert_eq!(call["name"], "get_calendar_events");
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("json");
    let call_id = call["call_id"].as_str().expect("call_id").to_string();
    let result = run("get_calendar_events", arguments, call_id.clone()).await;
    let item = json!({"type": "function_call_output", "call_id": call_id, "output": result.to_string()});
    client.send(json!({"type": "conversation.item.create", "item": item})).await;
    client.until("conversation.item.done").await;
    let spoken = joined(&client.respond().await, "response.output_audio_transcript.delta");
    assert!(spoken.starts_with("You have 1 event: Budget review on 2030-12-02 at 14:00"), "{spoken} / {result}");
}
