//! Frame classification: what voxgate pays per frame before forwarding it.
//!
//! Upstream frames (`peek_type` + `needs_inspection`) take the prefix fast path when `type` comes
//! first, as realtime servers send it; client frames go through `peek_client`: the flat shape of an
//! audio append is proved JSON by `protocol::flat` without a parser, any other frame by
//! `peek_checked`, which validates the whole frame as JSON (skipping, not building, the base64). Frames are the bench's ≈2.6 KB
//! audio frames (1,920 PCM bytes).

use std::hint::black_box;

use base64::Engine;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use voxgate::protocol::server::needs_inspection;
use voxgate::protocol::{peek_checked, peek_client, peek_type};

fn audio_b64() -> String {
    let pcm: Vec<u8> = (0..1920u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    base64::engine::general_purpose::STANDARD.encode(pcm)
}

fn classify(c: &mut Criterion) {
    let audio = audio_b64();
    let delta = format!(
        r#"{{"type":"response.output_audio.delta","event_id":"evt_1","response_id":"resp_1","item_id":"item_1","output_index":0,"content_index":0,"delta":"{audio}"}}"#
    );
    let delta_reordered = format!(r#"{{"event_id":"evt_1","delta":"{audio}","type":"response.output_audio.delta"}}"#);
    let append = format!(r#"{{"type":"input_audio_buffer.append","audio":"{audio}"}}"#);
    let done_args = r#"{"type":"response.function_call_arguments.done","event_id":"e","response_id":"r","item_id":"i","output_index":0,"call_id":"c","name":"calculate_medical_score","arguments":"{\"calculator_name\":\"bmi\",\"parameters\":{\"weight_kg\":70,\"height_cm\":175}}"}"#;

    let mut group = c.benchmark_group("upstream");
    group.throughput(Throughput::Bytes(delta.len() as u64));
    group.bench_function("audio_delta_type_first", |b| {
        b.iter(|| {
            let kind = peek_type(black_box(delta.as_str())).map(|k| needs_inspection(&k));
            black_box(kind)
        })
    });
    group.bench_function("audio_delta_type_last_fallback", |b| {
        b.iter(|| black_box(peek_type(black_box(delta_reordered.as_str())).map(|k| needs_inspection(&k))))
    });
    group.finish();
    c.bench_function("upstream/function_call_arguments_done", |b| {
        b.iter(|| black_box(peek_type(black_box(done_args)).map(|k| needs_inspection(&k))))
    });

    let mut group = c.benchmark_group("client");
    group.throughput(Throughput::Bytes(append.len() as u64));
    group.bench_function("audio_append_checked", |b| b.iter(|| black_box(peek_checked(black_box(append.as_bytes())).is_ok())));
    // What the session loop calls: the flat shape is proved JSON without a parser.
    group.bench_function("audio_append_peek_client", |b| b.iter(|| black_box(peek_client(black_box(append.as_str())).is_ok())));
    group.finish();

    c.bench_function("needs_inspection/miss", |b| b.iter(|| needs_inspection(black_box("response.output_audio_transcript.delta"))));
    c.bench_function("needs_inspection/hit", |b| b.iter(|| needs_inspection(black_box("response.function_call_arguments.done"))));
}

criterion_group!(benches, classify);
criterion_main!(benches);
