//! Property tests (proptest) over what voxgate reads from untrusted peers: frame classification,
//! the `response.done` rewrite, the `session.update` / `response.create` /
//! `conversation.item.create` guards, and tool argument validation. Seeds are the recorded
//! frames of `proto-fixtures/`, mutated (truncated, bytes flipped, fields replaced) and mixed with
//! arbitrary input. Bounded for CI by `PROPTEST_CASES` (default 256 per property); docs/reliability.md
//! has the longer run and its figures.

use std::sync::LazyLock;

use proptest::prelude::*;
use serde_json::{Value, json};
use voxgate::protocol::client::{self, CallGuard, Refusal};
use voxgate::protocol::{peek_checked, peek_type, server};

/// Every event of every fixture conversation, as the bytes a peer sent.
static FRAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto-fixtures");
    let mut frames = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let record: Value = serde_json::from_str(line).unwrap();
            if let Some(event) = record.get("event") {
                frames.push(event.to_string());
            }
        }
    }
    assert!(frames.len() > 100, "fixtures missing");
    frames
});

static RESPONSE_DONE: LazyLock<Vec<String>> = LazyLock::new(|| {
    let done: Vec<String> = FRAMES
        .iter()
        .filter(|f| peek_type(f).is_ok_and(|k| k == "response.done"))
        .cloned()
        .collect();
    assert!(!done.is_empty(), "no response.done in the fixtures");
    done
});

const SERVER_TOOLS: [&str; 3] = [
    "search_pubmed",
    "create_calendar_event",
    "calculate_medical_score",
];

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A fixture frame, possibly mutated: truncated, a byte replaced, or left whole.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    (0..FRAMES.len(), any::<u16>(), any::<u8>(), 0u8..3).prop_map(|(i, at, byte, how)| {
        let mut bytes = FRAMES[i].as_bytes().to_vec();
        let at = usize::from(at) % bytes.len().max(1);
        match how {
            0 => bytes.truncate(at),
            1 => bytes[at] = byte,
            _ => {}
        }
        bytes
    })
}

/// Arbitrary JSON, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z_ ]{0,12}".prop_map(Value::from),
        prop::sample::select(SERVER_TOOLS.to_vec()).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::hash_map("[a-z_]{1,10}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A tool definition a client might send: function tools (some named like server tools), hosted
/// MCP tools, and junk.
fn client_tool() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        prop::sample::select(SERVER_TOOLS.to_vec()).prop_map(str::to_string),
        "[a-z_]{1,12}"
    ];
    prop_oneof![
        name.prop_map(|n| json!({"type": "function", "name": n, "parameters": {"type": "object"}})),
        Just(
            json!({"type": "mcp", "server_label": "x", "server_url": "https://example.invalid/mcp"})
        ),
        json_value(),
    ]
}

/// An item a client might put in `response.input` or `conversation.item.create`.
fn client_item() -> impl Strategy<Value = Value> {
    let kind = prop::sample::select(vec![
        "function_call_output",
        "function_call",
        "message",
        "item_reference",
    ]);
    let call_id = prop::sample::select(vec!["call_srv", "call_client", "call_other"]);
    let name = prop::sample::select(vec!["search_pubmed", "get_weather", "lookup"]);
    prop_oneof![
        (kind, call_id, name).prop_map(|(k, c, n)| json!({"type": k, "call_id": c, "name": n, "output": "{}", "arguments": "{}"})),
        json_value(),
    ]
}

fn is_server_tool(name: &str) -> bool {
    SERVER_TOOLS.contains(&name)
}

type Predicate = fn(&str) -> bool;

fn guard(allow_hosted_mcp: bool) -> CallGuard<Predicate, Predicate> {
    CallGuard {
        is_server_tool,
        owns_call: |c| c == "call_srv",
        allow_hosted_mcp,
    }
}

fn server_definitions() -> Vec<Value> {
    SERVER_TOOLS
        .iter()
        .map(|n| json!({"type": "function", "name": n, "description": "server"}))
        .collect()
}

/// The tools a guarded frame sends on: each server tool once, no client tool with a server name.
fn assert_server_tools_kept(tools: &Value) {
    let tools = tools.as_array().expect("tools stay a list");
    for name in SERVER_TOOLS {
        let copies: Vec<&Value> = tools.iter().filter(|t| t["name"] == name).collect();
        assert_eq!(
            copies.len(),
            1,
            "{name} must appear once, the server's: {tools:?}"
        );
        assert_eq!(copies[0]["description"], "server");
    }
}

fn is_server_call_item(item: &Value) -> bool {
    matches!(
        item["type"].as_str(),
        Some("function_call_output" | "function_call")
    ) && (item["call_id"] == "call_srv" || item["name"].as_str().is_some_and(is_server_tool))
}

proptest! {
    #![proptest_config(config())]

    /// Classification never panics, and the fast path agrees with a full parse on every frame
    /// that is JSON.
    #[test]
    fn classification_is_total_and_consistent(bytes in frame()) {
        let checked = peek_checked(&bytes);
        // Text frames reach the classifier as UTF-8 (the WebSocket layer checks it).
        if let (Ok((kind, _)), Ok(text)) = (&checked, std::str::from_utf8(&bytes)) {
            let fast = peek_type(text);
            prop_assert_eq!(fast.as_deref().ok(), Some(kind.as_ref()));
        }
    }

    /// Arbitrary bytes are classified or refused, never a panic.
    #[test]
    fn classification_survives_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = peek_checked(&bytes);
        let _ = peek_type(&String::from_utf8_lossy(&bytes));
    }

    /// The rewrite removes exactly the owned calls' items, keeps everything else, and reports
    /// every call it saw.
    #[test]
    fn response_done_rewrite_hides_exactly_the_owned_calls(
        i in 0..RESPONSE_DONE.len(),
        owned_names in prop::collection::hash_set(prop::sample::select(vec!["search_pubmed", "get_weather", "calculate_medical_score"]), 0..3),
        extra in prop::collection::vec((prop::sample::select(vec!["search_pubmed", "get_weather"]), "[a-z]{1,6}"), 0..4),
    ) {
        let mut event: Value = serde_json::from_str(&RESPONSE_DONE[i]).unwrap();
        if let Some(output) = event["response"]["output"].as_array_mut() {
            for (name, id) in &extra {
                output.push(json!({"type": "function_call", "name": name, "call_id": format!("call_{id}"), "arguments": "{}", "status": "completed"}));
            }
        }
        let bytes = event.to_string();
        let owned = |_: &str, name: &str| owned_names.contains(name);
        let done = server::rewrite_response_done(bytes.as_bytes(), owned).unwrap();
        let calls_in = event["response"]["output"].as_array().map_or(0, |o| o.iter().filter(|i| i["type"] == "function_call").count());
        prop_assert_eq!(done.calls.len(), calls_in);
        let any_owned = done.calls.iter().any(|c| owned_names.contains(c.name.as_str()));
        prop_assert_eq!(done.rewritten.is_some(), any_owned);
        if let Some(rewritten) = done.rewritten {
            let out: Value = serde_json::from_str(&rewritten).unwrap();
            prop_assert_eq!(&out["type"], "response.done");
            let output = out["response"]["output"].as_array().unwrap();
            prop_assert!(output.iter().all(|i| !(i["type"] == "function_call" && owned_names.contains(i["name"].as_str().unwrap_or_default()))));
            let kept_before = event["response"]["output"].as_array().unwrap().iter()
                .filter(|i| !(i["type"] == "function_call" && owned_names.contains(i["name"].as_str().unwrap_or_default()))).count();
            prop_assert_eq!(output.len(), kept_before);
        }
    }

    /// The rewrite never panics on mutated frames.
    #[test]
    fn response_done_rewrite_survives_mutation(bytes in frame()) {
        let _ = server::rewrite_response_done(&bytes, |_, _| true);
    }

    /// `session.update`: whatever the client's tools, every server tool goes on (the server's
    /// definition), and hosted MCP is refused unless allowed.
    #[test]
    fn session_update_keeps_server_tools(tools in prop::collection::vec(client_tool(), 0..8), allow in any::<bool>()) {
        let frame = json!({"type": "session.update", "session": {"tools": tools}}).to_string();
        let has_mcp = tools.iter().any(|t| t["type"] == "mcp");
        match client::merge_session_update(frame.as_bytes(), &server_definitions(), &guard(allow)) {
            Ok(Some(merged)) => {
                prop_assert!(allow || !has_mcp, "hosted MCP slipped through");
                let out: Value = serde_json::from_str(&merged.frame).unwrap();
                assert_server_tools_kept(&out["session"]["tools"]);
            }
            Ok(None) => prop_assert!(false, "a frame with tools was not guarded"),
            Err(refusal) => prop_assert_eq!(refusal, Refusal::HostedMcp),
        }
    }

    /// `response.create`: no item of a server call in `input` gets through, per-response tools
    /// keep the server tools, hosted MCP refused unless allowed.
    #[test]
    fn response_create_is_guarded(
        input in prop::option::of(prop::collection::vec(client_item(), 0..5)),
        tools in prop::option::of(prop::collection::vec(client_tool(), 0..5)),
        allow in any::<bool>(),
    ) {
        let mut response = json!({"instructions": "x"});
        if let Some(input) = &input { response["input"] = json!(input); }
        if let Some(tools) = &tools { response["tools"] = json!(tools); }
        let frame = json!({"type": "response.create", "response": response}).to_string();
        let forged = input.as_ref().is_some_and(|i| i.iter().any(is_server_call_item));
        let has_mcp = tools.as_ref().is_some_and(|t| t.iter().any(|t| t["type"] == "mcp"));
        match client::guard_response_create(frame.as_bytes(), &server_definitions(), &guard(allow), None) {
            Err(Refusal::ServerCall) => prop_assert!(forged),
            Err(Refusal::HostedMcp) => prop_assert!(!allow && has_mcp && !forged),
            Err(Refusal::Malformed) => prop_assert!(false, "a JSON frame was called malformed"),
            Err(Refusal::RepeatedKey) => prop_assert!(false, "a frame built from a map has no repeated key"),
            Ok(result) => {
                prop_assert!(!forged, "a server call item got through");
                prop_assert!(allow || !has_mcp, "hosted MCP slipped through");
                match result {
                    Some(merged) => {
                        let out: Value = serde_json::from_str(&merged.frame).unwrap();
                        assert_server_tools_kept(&out["response"]["tools"]);
                    }
                    None => prop_assert!(tools.is_none()),
                }
            }
        }
    }

    /// `conversation.item.create`: the guard flags exactly the items of server calls.
    #[test]
    fn item_create_guard_flags_server_calls(item in client_item()) {
        let frame = json!({"type": "conversation.item.create", "item": item}).to_string();
        let parsed = client::parse_item_create(frame.as_bytes());
        if let Ok(create) = parsed {
            let flagged = create.item.is_some_and(|i| guard(false).is_server_call_item(i.kind.as_deref(), i.call_id.as_deref(), i.name.as_deref()));
            prop_assert_eq!(flagged, is_server_call_item(&item));
        }
    }

    /// The guards never panic on mutated frames.
    #[test]
    fn guards_survive_mutation(bytes in frame()) {
        let _ = client::merge_session_update(&bytes, &server_definitions(), &guard(false));
        let _ = client::guard_response_create(&bytes, &server_definitions(), &guard(false), None);
        let _ = client::parse_item_create(&bytes);
        let _ = client::parse_confirm(&bytes);
    }

    /// Argument validation answers every value for every tool with Ok or a typed error.
    #[test]
    fn argument_validation_is_total(args in json_value()) {
        for tool in REGISTRY.allowed_for(&PRINCIPAL) {
            let _ = tool.validate(&args);
        }
    }
}

static REGISTRY: LazyLock<voxgate::tools::registry::ToolRegistry> = LazyLock::new(|| {
    // A calendar file of this process's own: the default one is locked by whichever process opens
    // it first (nextest runs each test as a process).
    let mut config = voxgate::config::Config::default();
    config.backends.calendar.path = std::env::temp_dir().join(format!("voxgate-fuzz-{}.ics", std::process::id()));
    voxgate::tools::registry::ToolRegistry::from_config(&config).unwrap()
});

static PRINCIPAL: LazyLock<voxgate::policy::Principal> = LazyLock::new(|| {
    voxgate::policy::Principal::new("fuzz", vec!["clinician".into(), "admin".into()])
});
