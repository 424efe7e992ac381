//! Test helpers for tools that call an HTTP backend: a fake service on 127.0.0.1 that answers every
//! GET with one body (after planned failures, each with an optional `Retry-After`) and records what
//! it was sent, and a call context; and [`Quiet`], a tool that does nothing, for tests of what
//! surrounds a call (the call table, audit recovery).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::CallContext;
use crate::policy::Principal;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: HeaderMap,
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A planned failure: status and `Retry-After` value.
pub type Failure = (u16, Option<&'static str>);

pub struct FakeHttp {
    body: String,
    failures: Mutex<VecDeque<Failure>>,
    seen: Mutex<Vec<Seen>>,
}

impl FakeHttp {
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(
    State(fake): State<Arc<FakeHttp>>,
    uri: Uri,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let path = uri.path().to_string();
    fake.seen.lock().unwrap().push(Seen {
        path,
        query,
        headers,
        at: Instant::now(),
    });
    if let Some((status, retry_after)) = fake.failures.lock().unwrap().pop_front() {
        // A body naming an internal host: it must never reach the model.
        let mut response = (
            StatusCode::from_u16(status).unwrap(),
            "trouble at db-7.internal",
        )
            .into_response();
        if let Some(value) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", value.parse().unwrap());
        }
        return response;
    }
    ([("content-type", "application/json")], fake.body.clone()).into_response()
}

/// Start a fake answering `body` after `failures`; its base URL.
pub async fn start(body: impl Into<String>, failures: Vec<Failure>) -> (Arc<FakeHttp>, String) {
    let fake = Arc::new(FakeHttp {
        body: body.into(),
        failures: Mutex::new(failures.into()),
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(get(handle)).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, format!("http://{addr}"))
}

pub fn ctx() -> CallContext {
    CallContext {
        session_id: "s".into(),
        call_id: "c".into(),
        principal: Principal::new("u", vec![]),
    }
}

/// A tool that answers `{}` at once: its spec is all a test of the call table or of audit recovery
/// needs.
pub struct Quiet(pub super::ToolSpec);

#[async_trait::async_trait]
impl super::Tool for Quiet {
    fn spec(&self) -> &super::ToolSpec {
        &self.0
    }
    async fn call(&self, _: serde_json::Value, _: CallContext) -> Result<super::ToolOutput, super::ToolError> {
        Ok(super::ToolOutput::new(serde_json::json!({})))
    }
}
