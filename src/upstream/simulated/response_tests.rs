//! Tests of [`ResponseRun`](super::ResponseRun): the event order of a response, its deltas, and
//! what a cancel closes.

use super::*;

fn settings(modality: Modality) -> Settings {
    Settings {
        modality,
        voice: json!("marin"),
        conversation_id: Some("conv_1".into()),
        metadata: Value::Null,
        input_text_chars: 40,
        input_audio_ms: 0,
    }
}

/// Every event of a run to the end, by type.
fn drain(run: &mut ResponseRun) -> Vec<Value> {
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let step = run.step();
        all.extend(step.events);
        if step.finished {
            return all;
        }
    }
    panic!("the run never finished");
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

#[test]
fn deltas_rebuild_the_text() {
    let text = "This is voxgate's simulated model. You said: hello there.";
    for modality in [Modality::Audio, Modality::Text] {
        let joined: String = pieces(&Output::Speech(text.into()), modality).concat();
        assert_eq!(joined, text);
    }
    let call =
        Output::Call { name: "f".into(), call_id: "call_1".into(), arguments: "{\"query\":\"sepsis\"}".into() };
    let parts = pieces(&call, Modality::Audio);
    assert_eq!(parts.len(), 3);
    assert_eq!(parts.concat(), "{\"query\":\"sepsis\"}");
}

#[test]
fn text_response_order() {
    let mut run = ResponseRun::new(vec![Output::Speech("one two three four".into())], settings(Modality::Text));
    let events = drain(&mut run);
    assert_eq!(
        types(&events),
        [
            "response.output_item.added",
            "conversation.item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "conversation.item.done",
            "response.output_item.done",
            "response.done",
            "rate_limits.updated",
        ]
    );
    let done = &events[9]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "one two three four");
    assert_eq!(done["output_modalities"], json!(["text"]));
}

#[test]
fn cancelling_mid_speech_closes_the_item_as_incomplete() {
    let mut run =
        ResponseRun::new(vec![Output::Speech("a fairly long answer to cut".into())], settings(Modality::Audio));
    for _ in 0..4 {
        run.step();
    }
    let events = run.cancel("client_cancelled");
    assert_eq!(
        types(&events),
        [
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "conversation.item.done",
            "response.output_item.done",
            "response.done",
            "rate_limits.updated",
        ]
    );
    let done = &events[5]["response"];
    assert_eq!(done["status"], "cancelled");
    assert_eq!(done["status_details"], json!({"type": "cancelled", "reason": "client_cancelled"}));
    assert_eq!(done["output"][0]["status"], "incomplete");
}

/// A call cut off mid-arguments still gets its `.done` (with what was streamed), as the service
/// sends it (PROTOCOL-NOTES §3.4), and only then its `incomplete` item.
#[test]
fn cancelling_mid_arguments_sends_done_then_the_incomplete_call() {
    let arguments = "{\"calculator_name\":\"bmi\",\"inputs\":{}}";
    let call = Output::Call { name: "f".into(), call_id: "call_1".into(), arguments: arguments.into() };
    let mut run = ResponseRun::new(vec![call.clone()], settings(Modality::Audio));
    run.step(); // output_item.added
    let first = run.step(); // the first arguments delta
    assert_eq!(types(&first.events), ["response.function_call_arguments.delta"]);
    let events = run.cancel("turn_detected");
    assert_eq!(
        types(&events),
        [
            "response.function_call_arguments.done",
            "conversation.item.done",
            "response.output_item.done",
            "response.done",
            "rate_limits.updated",
        ]
    );
    let streamed = pieces(&call, Modality::Audio)[0].clone();
    assert_eq!(events[0]["arguments"], json!(streamed));
    assert_eq!((events[0]["call_id"].as_str(), events[0]["name"].as_str()), (Some("call_1"), Some("f")));
    assert_eq!(events[1]["item"]["status"], "incomplete");
    assert_eq!(events[3]["response"]["status"], "cancelled");
    assert_eq!(events[3]["response"]["output"][0]["arguments"], json!(streamed));
}

#[test]
fn out_of_band_responses_touch_no_conversation() {
    let mut oob = settings(Modality::Text);
    oob.conversation_id = None;
    let call = Output::Call { name: "f".into(), call_id: "call_1".into(), arguments: "{}".into() };
    let mut run = ResponseRun::new(vec![call], oob);
    let events = drain(&mut run);
    assert!(types(&events).iter().all(|t| !t.starts_with("conversation.")), "{:?}", types(&events));
    let done = events.iter().find(|e| e["type"] == "response.done").expect("done");
    assert_eq!(done["response"]["conversation_id"], Value::Null);
    assert_eq!(done["response"]["output"][0]["arguments"], "{}");
}
