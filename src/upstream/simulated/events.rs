//! Shapes of the server events the simulated model sends, in the GA Realtime wire format
//! (PROTOCOL-NOTES §3): ids, the session object, the response object, usage and `error`.
//! Every server event gets a fresh `event_…` id here, in one place, so none can be forgotten.

use rand::Rng;
use rand::distr::Alphanumeric;
use serde_json::{Value, json};

use super::audio::SAMPLE_RATE;

/// Characters after the prefix of live ids (`event_` + 21 base62 characters).
const ID_LEN: usize = 21;
/// `call_` ids are shorter in live GA sessions (`call_9Q9eysr6LstYMEx6`).
const CALL_ID_LEN: usize = 16;
/// Lifetime the session object advertises (the real service's sessions last up to 60 minutes).
const SESSION_LIFETIME_SECS: i64 = 60 * 60;

/// A fresh id: `prefix_` plus random base62 characters.
pub fn new_id(prefix: &str) -> String {
    random_id(prefix, ID_LEN)
}

/// A fresh `call_…` id for a function call.
pub fn new_call_id() -> String {
    random_id("call", CALL_ID_LEN)
}

fn random_id(prefix: &str, len: usize) -> String {
    let tail: String = rand::rng().sample_iter(&Alphanumeric).take(len).map(char::from).collect();
    format!("{prefix}_{tail}")
}

/// Stamp a server event with its `type` and a fresh `event_id`.
pub fn server_event(kind: &str, mut fields: Value) -> Value {
    let mut event = serde_json::Map::new();
    event.insert("type".into(), json!(kind));
    event.insert("event_id".into(), json!(new_id("event")));
    if let Some(fields) = fields.as_object_mut() {
        event.append(fields);
    }
    Value::Object(event)
}

/// An `error` event. `client_event_id` is the failing client event's `event_id`, if it had one.
pub fn error_event(code: &str, message: &str, param: Option<&str>, client_event_id: Option<&str>) -> Value {
    server_event(
        "error",
        json!({ "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "param": param,
            "event_id": client_event_id,
        }}),
    )
}

/// The `audio/pcm` 24 kHz format object.
pub fn pcm_format() -> Value {
    json!({ "type": "audio/pcm", "rate": SAMPLE_RATE })
}

/// The session object of `session.created`, with the service's defaults.
pub fn default_session(id: &str, model: &str) -> Value {
    let expires_at = chrono::Utc::now().timestamp() + SESSION_LIFETIME_SECS;
    json!({
        "type": "realtime",
        "object": "realtime.session",
        "id": id,
        "model": model,
        "output_modalities": ["audio"],
        "instructions": "You are voxgate's simulated realtime model. You do not understand speech and \
                         only recognise a few typed requests; you are meant for development and tests.",
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "tracing": null,
        "truncation": "auto",
        "prompt": null,
        "expires_at": expires_at,
        "audio": {
            "input": {
                "format": pcm_format(),
                "transcription": null,
                "noise_reduction": null,
                "turn_detection": {
                    "type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                    "silence_duration_ms": 500, "idle_timeout_ms": null,
                    "create_response": true, "interrupt_response": true,
                },
            },
            "output": { "format": pcm_format(), "voice": "marin", "speed": 1 },
        },
        "include": null,
    })
}

/// What a response produced, for `usage`: rough token counts in the service's proportions.
#[derive(Debug, Clone, Copy, Default)]
pub struct UsageCounts {
    pub input_text_chars: usize,
    pub input_audio_ms: u64,
    pub output_text_chars: usize,
    pub output_audio_ms: u64,
}

/// The `usage` object of `response.done` (about 4 characters per text token, 10 audio tokens per second).
pub fn usage(counts: UsageCounts) -> Value {
    let input_text = counts.input_text_chars.div_ceil(4) as u64;
    let input_audio = counts.input_audio_ms / 100;
    let output_text = counts.output_text_chars.div_ceil(4) as u64;
    let output_audio = counts.output_audio_ms / 100;
    let input = input_text + input_audio;
    let output = output_text + output_audio;
    json!({
        "total_tokens": input + output,
        "input_tokens": input,
        "output_tokens": output,
        "input_token_details": {
            "text_tokens": input_text, "audio_tokens": input_audio, "image_tokens": 0, "cached_tokens": 0,
            "cached_tokens_details": { "text_tokens": 0, "audio_tokens": 0, "image_tokens": 0 },
        },
        "output_token_details": { "text_tokens": output_text, "audio_tokens": output_audio },
    })
}

/// The `rate_limits.updated` event live GA sends right after `response.done`.
pub fn rate_limits(tokens_used: u64) -> Value {
    const LIMIT: u64 = 15_000_000;
    server_event(
        "rate_limits.updated",
        json!({ "rate_limits": [{
            "name": "tokens", "limit": LIMIT, "remaining": LIMIT.saturating_sub(tokens_used),
            "reset_seconds": 0.001,
        }]}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_live_shape() {
        let id = new_id("event");
        assert!(id.starts_with("event_") && id.len() == 6 + ID_LEN, "{id}");
        assert!(id[6..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(new_id("event"), new_id("event"));
        assert_eq!(new_call_id().len(), 5 + CALL_ID_LEN);
    }

    #[test]
    fn server_events_carry_type_event_id_and_fields() {
        let event = server_event("session.updated", json!({"session": {"id": "sess_1"}}));
        assert_eq!(event["type"], "session.updated");
        assert!(event["event_id"].as_str().is_some_and(|id| id.starts_with("event_")));
        assert_eq!(event["session"]["id"], "sess_1");
    }

    #[test]
    fn error_event_matches_the_ga_shape() {
        let event = error_event(
            "response_cancel_not_active",
            "Cancellation failed: no active response found",
            None,
            Some("c1"),
        );
        assert_eq!(event["type"], "error");
        assert_eq!(event["error"]["type"], "invalid_request_error");
        assert_eq!(event["error"]["code"], "response_cancel_not_active");
        assert_eq!(event["error"]["param"], Value::Null);
        assert_eq!(event["error"]["event_id"], "c1");
    }

    #[test]
    fn usage_adds_up() {
        let value = usage(UsageCounts {
            input_text_chars: 40,
            input_audio_ms: 1_000,
            output_text_chars: 8,
            output_audio_ms: 2_000,
        });
        assert_eq!(value["input_tokens"], 20);
        assert_eq!(value["output_tokens"], 22);
        assert_eq!(value["total_tokens"], 42);
    }
}
