//! Outgoing HTTP for tools that call a backend (PubMed, web search, evidence, the differential
//! LLM, CalDAV): one way to build the client, send with trace context, read a bounded body, and retry.
//!
//! TOOLS.md's retry rule lives here once ([`retry_delay`]): connect errors, timeouts and 5xx are
//! retried up to 3 times (so [`MAX_ATTEMPTS`] is 4) with exponential back-off and jitter, a 429
//! only when it says when (`Retry-After`, honoured); any other answer fails at once. All of it
//! "inside the tool's timeout": the call runs [`within_deadline`] of its timeout, a retry that
//! would not end before it (waiting, then taking as long as the attempt before it) is not started,
//! and each attempt gets at most what is left of it (less [`DEADLINE_MARGIN`]; the call's first
//! request at least the margin's worth) rather than the client's fixed timeout, so a backend that
//! hangs is reported as failing (`backend_error`, with its advice to the model) rather than cut
//! off as a `timeout`.
//!
//! A reqwest error's `Display` includes the URL, and some APIs carry their key in the query string,
//! so errors are reduced to a [`Failure`] (kind and status only) before anything logs them.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use rand::Rng;
use reqwest::StatusCode;
use url::Url;

/// Attempts per request, the first included: TOOLS.md and the seed retry "up to 3 times".
pub const MAX_ATTEMPTS: u32 = 4;
/// First back-off; doubled on each retry, plus up to 50% jitter.
const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// A `Retry-After` longer than this is not waited for in full (the tool has a 30 s budget).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// An attempt is cut off this long before the call's deadline, so that its failure (with its advice
/// to the model) is reported before the session's own timeout fires.
const DEADLINE_MARGIN: Duration = Duration::from_millis(250);

/// Why a request failed, in terms safe to log: no URL, no body, no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("could not connect")]
    Connect,
    #[error("timed out")]
    Timeout,
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("answer larger than allowed")]
    TooLarge,
    #[error("transport error")]
    Transport,
}

/// The running tool call's deadline, and whether it has asked a backend yet.
struct CallDeadline {
    at: Instant,
    asked: std::cell::Cell<bool>,
}

tokio::task_local! {
    /// When the running tool call's timeout ends ([`within_deadline`]).
    static DEADLINE: CallDeadline;
}

/// Run a tool call whose timeout ends at `deadline`: the retry loops inside it start no retry that
/// could not end before then.
pub async fn within_deadline<F: Future>(deadline: Instant, call: F) -> F::Output {
    DEADLINE.scope(CallDeadline { at: deadline, asked: std::cell::Cell::new(false) }, call).await
}

/// What is left of the running tool call's timeout; `None` outside a call.
pub(crate) fn time_left() -> Option<Duration> {
    DEADLINE.try_with(|deadline| deadline.at.saturating_duration_since(Instant::now())).ok()
}

/// Whether this is the call's first backend request (and from now on it is not); `false` outside a
/// call.
fn first_request_of_call() -> bool {
    DEADLINE.try_with(|deadline| !deadline.asked.replace(true)).unwrap_or(false)
}

impl Failure {
    /// Whether another attempt may help: a transient failure, or a 429 that says when to come back.
    pub(crate) fn retryable(&self, retry_after: Option<Duration>) -> bool {
        match self {
            Failure::Status(429) => retry_after.is_some(),
            other => other.is_transient(),
        }
    }

    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Failure::Connect | Failure::Timeout | Failure::Transport => true,
            // A 429 is retried only with a `Retry-After` ([`retry_delay`]).
            Failure::Status(code) => (500..600).contains(code),
            Failure::TooLarge => false,
        }
    }
}

/// One failed attempt: why, and how long the server asked us to wait.
pub type AttemptError = (Failure, Option<Duration>);

/// A client for one backend: bounded connect and request time, no redirects (a third party is
/// reached only at its configured base URL), voxgate's user agent.
pub fn client(request_timeout: Duration) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(request_timeout))
        .timeout(request_timeout)
        .user_agent(concat!("voxgate/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {}", e.without_url()))
}

/// Parse an http(s) API root and make sure it ends with '/', so `join("x")` appends instead of
/// replacing the last segment.
pub fn base_url(value: &str, key: &str) -> Result<Url, String> {
    let mut base = Url::parse(value).map_err(|e| format!("{key} is not a URL: {e}"))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(format!("{key} must be http or https"));
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

/// Send one request with the current span's trace context and read its body, at most `max_bytes`.
pub async fn attempt(
    request: reqwest::RequestBuilder,
    max_bytes: usize,
) -> Result<Bytes, AttemptError> {
    let headers = crate::telemetry::trace_headers(&tracing::Span::current());
    let response = request
        .headers(headers)
        .send()
        .await
        .map_err(|e| (classify(&e), None))?;
    let status = response.status();
    if !status.is_success() {
        let wait = (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
            .then(|| retry_after(response.headers()))
            .flatten();
        return Err((Failure::Status(status.as_u16()), wait));
    }
    read_capped(response, max_bytes).await.map_err(|failure| (failure, None))
}

/// Read a response body, refusing it as soon as it is known to exceed `max_bytes`: from
/// `Content-Length` before anything is read, else while it streams. A server that sends a chunked
/// body without end is cut off at the cap, not read until the request's timeout.
pub(crate) async fn read_capped(mut response: reqwest::Response, max_bytes: usize) -> Result<Bytes, Failure> {
    if response.content_length().is_some_and(|len| len > max_bytes as u64) {
        return Err(Failure::TooLarge);
    }
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e))? {
        if body.len() + chunk.len() > max_bytes {
            return Err(Failure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Run `attempt_once` until it succeeds (with a body, or CalDAV's answer of any status), fails for
/// good, or [`MAX_ATTEMPTS`] are spent. Inside a
/// call ([`within_deadline`]) each attempt is cut off (as [`Failure::Timeout`]) when only
/// [`DEADLINE_MARGIN`] of the call is left (the call's first request excepted: its first attempt
/// gets at least the margin's worth, or all that is left when less is), and none is started after
/// that.
/// `backend` names the service in logs ("PubMed", "web search").
pub async fn with_retries<T, F, Fut>(
    backend: &'static str,
    mut attempt_once: F,
) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, AttemptError>>,
{
    let mut attempt = 1;
    // What to report if the call's time runs out before an attempt can start.
    let mut last = Failure::Timeout;
    // The call's first request gets at least the margin's worth (all that is left when less is):
    // a tool with a timeout near the margin still asks its backend, and ends as `timeout` if that
    // is too slow. A later request of the same call does not: it would run into the call's own
    // deadline, and the tool would end as `timeout` instead of with its backend's answer.
    let floor = first_request_of_call();
    loop {
        // The client's own timeout (10 s, 15 s) may be longer than what is left of the call.
        let budget = time_left().map(|left| match left.saturating_sub(DEADLINE_MARGIN) {
            margin_left if attempt == 1 && floor => margin_left.max(left.min(DEADLINE_MARGIN)),
            margin_left => margin_left,
        });
        if budget.is_some_and(|budget| budget.is_zero()) {
            tracing::warn!(backend, attempt, error = %last, "no time left for another backend request");
            return Err(last);
        }
        let started = Instant::now();
        let outcome = match budget {
            Some(budget) => tokio::time::timeout(budget, attempt_once()).await.unwrap_or(Err((Failure::Timeout, None))),
            None => attempt_once().await,
        };
        match outcome {
            Ok(body) => return Ok(body),
            Err((failure, wait)) if let Some(delay) = retry_delay(failure.retryable(wait), wait, attempt, started.elapsed()) => {
                tracing::debug!(backend, attempt, error = %failure, "backend request failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
                last = failure;
            }
            Err((failure, _)) => {
                tracing::warn!(backend, attempt, error = %failure, "backend request failed");
                return Err(failure);
            }
        }
    }
}

/// Whether to retry after failed attempt number `attempt`, which took `took`, and how long to wait
/// first: `retry_after` (the server's `Retry-After`, capped) or [`backoff`]. Not when the failure
/// is not `retryable` ([`Failure::retryable`]: a 429 only with `Retry-After`, since without it a
/// retry would most likely be refused again), once [`MAX_ATTEMPTS`] are spent, or when waiting and
/// then taking as long again would end past the call's deadline ([`within_deadline`]).
pub(crate) fn retry_delay(retryable: bool, retry_after: Option<Duration>, attempt: u32, took: Duration) -> Option<Duration> {
    if !retryable || attempt >= MAX_ATTEMPTS {
        return None;
    }
    let delay = retry_after.unwrap_or_else(|| backoff(attempt));
    let fits = time_left().is_none_or(|left| delay + took < left);
    fits.then_some(delay)
}

/// What went wrong, without the URL (it may carry an API key).
pub(crate) fn classify(err: &reqwest::Error) -> Failure {
    if err.is_timeout() {
        Failure::Timeout
    } else if err.is_connect() {
        Failure::Connect
    } else {
        Failure::Transport
    }
}

/// `Retry-After`, capped: in seconds, or as an HTTP date. A header that is there but reads as
/// neither still says "come back later": the first back-off step.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().unwrap_or_default().trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => match httpdate::parse_http_date(value) {
            Ok(at) => at.duration_since(std::time::SystemTime::now()).unwrap_or_default(),
            Err(_) => BASE_BACKOFF,
        },
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// 250 ms, 500 ms, … plus up to 50% jitter so that sessions retrying together spread out.
pub(crate) fn backoff(attempt: u32) -> Duration {
    jittered(backoff_base(attempt))
}

/// The back-off before retry `attempt` (1-based) without its jitter: 250 ms, doubled each time.
pub(crate) fn backoff_base(attempt: u32) -> Duration {
    BASE_BACKOFF.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
}

/// `base` plus up to half of it again, at random.
pub(crate) fn jittered(base: Duration) -> Duration {
    base + Duration::from_millis(rand::rng().random_range(0..=base.as_millis() as u64 / 2))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn transient_failures_are_the_retryable_ones() {
        assert!(Failure::Status(503).is_transient());
        assert!(!Failure::Status(429).is_transient(), "only with Retry-After: retry_delay");
        assert!(Failure::Timeout.is_transient());
        assert!(Failure::Connect.is_transient());
        assert!(!Failure::Status(400).is_transient());
        assert!(!Failure::Status(404).is_transient());
        assert!(!Failure::TooLarge.is_transient());
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        for _ in 0..20 {
            let first = backoff(1);
            let second = backoff(2);
            assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(375));
            assert!(second >= Duration::from_millis(500) && second <= Duration::from_millis(750));
        }
    }

    /// How many attempts `with_retries` makes when every one fails with `failure`.
    async fn attempts_until_given_up(failure: Failure, retry_after: Option<Duration>) -> u32 {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let result: Result<Bytes, Failure> = with_retries("test", || {
            counter.fetch_add(1, Ordering::SeqCst);
            let failure = failure.clone();
            async move { Err((failure, retry_after)) }
        })
        .await;
        assert_eq!(result, Err(failure));
        calls.load(Ordering::SeqCst)
    }

    /// "Inside the tool's timeout": a backend that takes 10 s to fail each time gets a retry that
    /// can end before the call's 30 s (10 s, a back-off, 10 s), but not a third attempt, which would
    /// end past it; the failure is reported before the deadline, not cut off as a timeout.
    #[tokio::test(start_paused = true)]
    async fn no_retry_starts_that_could_not_end_before_the_calls_deadline() {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        let slow_failures = with_retries::<Bytes, _, _>("test", || {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Err((Failure::Status(503), None))
            }
        });
        assert_eq!(within_deadline(deadline, slow_failures).await, Err(Failure::Status(503)));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert!(Instant::now() < deadline);
    }

    /// Each attempt gets at most what is left of the call (less a margin), not the client's fixed
    /// timeout: three quick 429s with `Retry-After: 5` and then a hang, or a tool timeout shorter
    /// than the client's, still end as the backend's failure before the call's deadline.
    #[tokio::test(start_paused = true)]
    async fn each_attempt_is_capped_at_the_time_the_call_has_left() {
        let calls = Arc::new(AtomicU32::new(0));
        let counter = calls.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        let hangs_last = with_retries::<Bytes, _, _>("test", || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 3 {
                    return Err((Failure::Status(429), Some(MAX_RETRY_AFTER)));
                }
                // A client timeout of 15 s, as the evidence client has.
                tokio::time::sleep(Duration::from_secs(15)).await;
                Err((Failure::Timeout, None))
            }
        });
        assert_eq!(within_deadline(deadline, hangs_last).await, Err(Failure::Timeout));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert!(Instant::now() < deadline, "cut off by the deadline");

        // A tool timeout (5 s) shorter than the client's (10 s).
        let deadline = Instant::now() + Duration::from_secs(5);
        let slow = with_retries("test", || async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(Bytes::from_static(b"late"))
        });
        assert_eq!(within_deadline(deadline, slow).await, Err(Failure::Timeout));
        assert!(Instant::now() < deadline, "cut off by the deadline");

        // A timeout just over the margin (300 ms) and a backend answering in 120 ms: the first
        // attempt gets 250 ms, not 50.
        let near = with_retries("test", || async {
            tokio::time::sleep(Duration::from_millis(120)).await;
            Ok(Bytes::from_static(b"in time"))
        });
        assert_eq!(within_deadline(Instant::now() + Duration::from_millis(300), near).await, Ok(Bytes::from_static(b"in time")));

        // A whole timeout under the margin (200 ms): the first attempt is still made.
        let made = Arc::new(AtomicU32::new(0));
        let counter = made.clone();
        let short = with_retries("test", || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(Bytes::from_static(b"quick")) }
        });
        assert_eq!(within_deadline(Instant::now() + Duration::from_millis(200), short).await, Ok(Bytes::from_static(b"quick")));
        assert_eq!(made.load(Ordering::SeqCst), 1);

        // With nothing left, no attempt is started at all.
        let started = Arc::new(AtomicU32::new(0));
        let counter = started.clone();
        let none_left = with_retries("test", || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(Bytes::from_static(b"x")) }
        });
        assert_eq!(within_deadline(Instant::now(), none_left).await, Err(Failure::Timeout));
        assert_eq!(started.load(Ordering::SeqCst), 0);
    }

    /// The first-attempt floor is the call's, not each request's: a later request of the same call
    /// (a CalDAV PUT after its discovery, a WebDAV walk after its OPTIONS) with less than the margin
    /// left starts nothing, so it cannot run into the call's own deadline and end as `timeout`.
    #[tokio::test(start_paused = true)]
    async fn only_a_calls_first_request_gets_the_floor() {
        let deadline = Instant::now() + Duration::from_millis(400);
        let started = Arc::new(AtomicU32::new(0));
        let counter = started.clone();
        let call = async move {
            let first = with_retries("test", || async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(Bytes::from_static(b"discovered"))
            })
            .await;
            assert_eq!(first, Ok(Bytes::from_static(b"discovered")));
            // 200 ms left, under the margin.
            with_retries("test", || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok(Bytes::from_static(b"x")) }
            })
            .await
        };
        assert_eq!(within_deadline(deadline, call).await, Err(Failure::Timeout));
        assert_eq!(started.load(Ordering::SeqCst), 0, "no second request started");
    }

    /// `Retry-After` as seconds or as an HTTP date (RFC 9110 §10.2.3), capped; a value that is
    /// neither still means "later".
    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let header = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
            retry_after(&headers)
        };
        assert_eq!(header("2"), Some(Duration::from_secs(2)));
        assert_eq!(header("120"), Some(MAX_RETRY_AFTER));
        let soon = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3));
        assert!(header(&soon).is_some_and(|d| d > Duration::from_secs(1) && d <= Duration::from_secs(3)), "{soon}");
        assert_eq!(header("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO), "a date past");
        assert_eq!(header("soon"), Some(BASE_BACKOFF));
        assert_eq!(retry_after(&reqwest::header::HeaderMap::new()), None);
    }

    /// TOOLS.md (and the seed): transient failures "are retried up to 3 times", so four attempts in
    /// all; a 429 only "with `Retry-After`"; other 4xx never.
    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_three_times_a_429_only_when_it_says_when() {
        let second = Some(Duration::from_secs(1));
        assert_eq!(attempts_until_given_up(Failure::Status(503), second).await, 4);
        assert_eq!(attempts_until_given_up(Failure::Status(502), None).await, 4);
        assert_eq!(attempts_until_given_up(Failure::Connect, None).await, 4);
        assert_eq!(attempts_until_given_up(Failure::Status(429), second).await, 4);
        assert_eq!(attempts_until_given_up(Failure::Status(429), None).await, 1);
        assert_eq!(attempts_until_given_up(Failure::Status(404), None).await, 1);
        assert_eq!(attempts_until_given_up(Failure::TooLarge, None).await, 1);
    }

    /// A server that streams a chunked body without end (no `Content-Length`): the read stops at
    /// the cap, long before the request's timeout, and a body within the cap is read whole.
    #[tokio::test]
    async fn a_body_without_length_is_cut_off_at_the_cap_while_it_streams() {
        use axum::body::Body;
        let endless = axum::routing::get(|| async {
            let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
            Body::from_stream(futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone())))
        });
        let small = axum::routing::get(|| async { Body::from_stream(futures::stream::iter([Ok::<_, std::io::Error>("hello")])) });
        let app = axum::Router::new().route("/endless", endless).route("/small", small);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = client(Duration::from_secs(30)).unwrap();

        let started = std::time::Instant::now();
        let endless = attempt(client.get(format!("http://{addr}/endless")), 1024 * 1024).await;
        assert_eq!(endless.map(|b| b.len()), Err((Failure::TooLarge, None)));
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

        let small = attempt(client.get(format!("http://{addr}/small")), 1024).await;
        assert_eq!(small.as_deref(), Ok(&b"hello"[..]));
    }

    #[test]
    fn base_urls_get_a_trailing_slash_and_must_be_http() {
        assert_eq!(
            base_url("http://127.0.0.1:1/eutils", "k").unwrap().as_str(),
            "http://127.0.0.1:1/eutils/"
        );
        assert!(base_url("ftp://example.org/", "k").is_err());
        assert!(base_url("not a url", "k").is_err());
    }
}
