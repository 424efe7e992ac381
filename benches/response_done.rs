//! The `response.done` rewrite: voxgate parses every `response.done` and, when it lists a
//! server-owned function call, removes that call before the client sees it. This is once per
//! model response, not per audio frame, but it is a full parse and re-serialisation.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use voxgate::protocol::server::rewrite_response_done;

/// A `response.done` as a realtime server sends it after an audio answer plus `calls` function calls.
fn response_done(calls: usize) -> String {
    let transcript = "The BMI for 70 kilograms at 175 centimetres is 22.9, in the normal range. ".repeat(3);
    let mut output = vec![format!(
        r#"{{"id":"item_msg","object":"realtime.item","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_audio","transcript":"{transcript}"}}]}}"#
    )];
    for i in 0..calls {
        output.push(format!(
            r#"{{"id":"item_{i}","object":"realtime.item","type":"function_call","status":"completed","name":"calculate_medical_score","call_id":"call_{i}","arguments":"{{\"calculator_name\":\"bmi\",\"parameters\":{{\"weight_kg\":70,\"height_cm\":175}}}}"}}"#
        ));
    }
    format!(
        r#"{{"type":"response.done","event_id":"evt_9","response":{{"id":"resp_1","object":"realtime.response","status":"completed","status_details":null,"output":[{}],"usage":{{"total_tokens":612,"input_tokens":420,"output_tokens":192}}}}}}"#,
        output.join(",")
    )
}

fn rewrite(c: &mut Criterion) {
    let no_calls = response_done(0);
    let one_call = response_done(1);
    c.bench_function("response_done/audio_answer_no_calls", |b| {
        b.iter(|| black_box(rewrite_response_done(black_box(no_calls.as_bytes()), |_, _| true).map(|d| d.rewritten.is_some())))
    });
    c.bench_function("response_done/owned_call_removed", |b| {
        b.iter(|| black_box(rewrite_response_done(black_box(one_call.as_bytes()), |_, name| name == "calculate_medical_score").map(|d| d.rewritten.map(|s| s.len()))))
    });
    c.bench_function("response_done/client_call_kept", |b| {
        b.iter(|| black_box(rewrite_response_done(black_box(one_call.as_bytes()), |_, _| false).map(|d| d.calls.len())))
    });
}

criterion_group!(benches, rewrite);
criterion_main!(benches);
