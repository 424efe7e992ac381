//! The HTTP side of CalDAV: one reqwest client with Basic auth, bounded retries of transient
//! failures (the shared loop of `tools::http`, `with_retries`: connect errors, timeouts, 5xx, 429
//! with `Retry-After`, with exponential back-off and jitter; inside a tool call each attempt is cut
//! off at what is left of the call's timeout, less a margin, rather than the client's 10 s), W3C
//! trace context on every request, and a fence around the configured server: voxgate only ever
//! talks to the scheme, host and port of `backends.calendar.url`.
//!
//! A request that stores something ([`Dav::send_write`]) also says, with its answer or failure,
//! whether any of its attempts may have reached the server and not been answered for: only a
//! refused connection, a `429`, `501` or `507`, and a `503` with `Retry-After` (the server itself
//! saying "come back later") say that an attempt was not carried out ([`not_carried_out`]).
//!
//! A reqwest error's `Display` includes the URL (a calendar path names a person); only the kind of
//! failure is kept ([`Failure`]), and no response body is ever logged.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use url::Url;

use crate::config::Secret;
use crate::tools::http::{Failure, classify, read_capped, retry_after, with_retries};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (a month of a busy clinic calendar is far below this).
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// A request's answer, whatever its status (the caller decides what a 404 or 412 means).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: String,
    /// `Location` of a redirect (discovery through `/.well-known/caldav`).
    pub location: Option<String>,
}

/// What a write got: the last attempt's answer or failure, and whether any attempt, perhaps an
/// earlier one, may have reached the server without an answer saying what happened (cut off,
/// connection lost, a `500`, a gateway's `502`/`504`, a `503` without `Retry-After`), so that what
/// it sent may be stored whatever the last attempt met.
#[derive(Debug)]
pub struct Written {
    pub sent: Result<Answer, Failure>,
    pub may_have_arrived: bool,
}

/// The CalDAV server: its origin, credentials and the client.
pub struct Dav {
    http: reqwest::Client,
    origin: url::Origin,
    username: Option<String>,
    password: Option<Secret>,
}

impl std::fmt::Debug for Dav {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No URL (it may name a person) and no password.
        f.debug_struct("Dav").field("authenticated", &self.username.is_some()).finish()
    }
}

impl Dav {
    pub fn new(base: &Url, username: Option<String>, password: Option<Secret>) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("voxgate/", env!("CARGO_PKG_VERSION")))
            // Redirects are followed by discovery itself, after the same-server check.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http, origin: base.origin(), username, password })
    }

    /// Is `url` on the configured server? Hrefs from the server are checked before they are used.
    pub fn owns(&self, url: &Url) -> bool {
        url.origin() == self.origin
    }

    /// Send one request, retrying transient failures, each attempt within what is left of the call;
    /// any other status is returned as the answer.
    pub async fn send(
        &self,
        method: &str,
        url: &Url,
        headers: &[(&'static str, &str)],
        body: Option<(&'static str, String)>,
    ) -> Result<Answer, Failure> {
        self.send_counted(method, url, headers, body, &AtomicU32::new(0)).await
    }

    /// [`Dav::send`] for a request that stores something: with the answer or failure, whether any
    /// attempt, not only the last, may have reached the server.
    pub async fn send_write(
        &self,
        method: &str,
        url: &Url,
        headers: &[(&'static str, &str)],
        body: Option<(&'static str, String)>,
    ) -> Written {
        let unsettled = AtomicU32::new(0);
        let sent = self.send_counted(method, url, headers, body, &unsettled).await;
        Written { sent, may_have_arrived: unsettled.load(Ordering::Relaxed) > 0 }
    }

    /// [`Dav::send`], counting in `unsettled` the attempts that may have reached the server. An
    /// attempt is counted as it starts and uncounted when its outcome says it was answered or not
    /// carried out ([`not_carried_out`]): one cut off by the call's time (dropped mid-way) stays
    /// counted.
    async fn send_counted(
        &self,
        method: &str,
        url: &Url,
        headers: &[(&'static str, &str)],
        body: Option<(&'static str, String)>,
        unsettled: &AtomicU32,
    ) -> Result<Answer, Failure> {
        if !self.owns(url) {
            return Err(Failure::Transport);
        }
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| Failure::Transport)?;
        let body = body.as_ref();
        with_retries("CalDAV", || async {
            unsettled.fetch_add(1, Ordering::Relaxed);
            let outcome = self.attempt(&method, url, headers, body).await;
            if outcome.as_ref().map_or_else(|(failure, wait)| not_carried_out(failure, *wait), |_| true) {
                unsettled.fetch_sub(1, Ordering::Relaxed);
            }
            outcome
        })
        .await
    }

    async fn attempt(
        &self,
        method: &Method,
        url: &Url,
        headers: &[(&'static str, &str)],
        body: Option<&(&'static str, String)>,
    ) -> Result<Answer, (Failure, Option<Duration>)> {
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .headers(crate::telemetry::trace_headers(&tracing::Span::current()));
        for (name, value) in headers {
            let value = HeaderValue::from_str(value).map_err(|_| (Failure::Transport, None))?;
            request = request.header(*name, value);
        }
        if let Some(username) = &self.username {
            request = request.basic_auth(username, self.password.as_ref().map(Secret::expose));
        }
        if let Some((content_type, body)) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, *content_type).body(body.clone());
        }
        let response = request.send().await.map_err(|e| (classify(&e), None))?;
        let status = response.status();
        if is_transient(status) {
            // Retry-After is honoured (capped) only for the statuses that are retried.
            return Err((Failure::Status(status.as_u16()), retry_after(response.headers())));
        }
        let location = header_text(response.headers(), reqwest::header::LOCATION);
        let bytes = read_capped(response, MAX_BODY_BYTES).await.map_err(|failure| (failure, None))?;
        Ok(Answer { status, body: String::from_utf8_lossy(&bytes).into_owned(), location })
    }
}

/// Whether a failed attempt says that the server did not carry it out: no connection was made, or
/// the server said "not now" (`429`, `501`, `507`, and a `503` with `Retry-After`: the attempt's
/// `retry_after`). A `503` without it may be a proxy's (Envoy, Istio) whose connection to the
/// server dropped after it forwarded the request; a `500` may come after the event was stored (a
/// server or proxy failing on the way back), and a `502` or `504` from a gateway whose server may
/// have taken the request; any other failure (cut off, connection lost, an answer not read) came
/// after the request went out.
fn not_carried_out(failure: &Failure, retry_after: Option<Duration>) -> bool {
    match failure {
        Failure::Connect | Failure::Status(429 | 501 | 507) => true,
        Failure::Status(503) => retry_after.is_some(),
        _ => false,
    }
}

fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

fn header_text(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}
