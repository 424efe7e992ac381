//! The HTTP side of `search_pubmed`: one reqwest client, NCBI's request-rate limit shared by every
//! session, bounded retries, and W3C trace context on every request.
//!
//! NCBI allows 3 requests per second per client (10 with an API key) and blocks clients that go
//! over. The tool is one `Arc` shared by all sessions, so the [`Pacer`] inside it spaces *every*
//! request of the process, not each session's. Transient failures (connect errors, timeouts, 429,
//! 5xx) are retried with exponential back-off and jitter; anything else fails at once.
//!
//! The API key travels in the query string, so a reqwest error (whose `Display` includes the URL)
//! must never be logged as is: [`Failure`] keeps only the kind of failure and the status.

use std::time::Duration;

use rand::Rng;
use reqwest::StatusCode;
use tokio::sync::Mutex;
use tokio::time::Instant;
use url::Url;

/// Attempts per request, the first included (TOOLS.md: "up to 3 times").
pub const MAX_ATTEMPTS: u32 = 3;
/// First back-off; doubled on each retry, plus up to 50% jitter.
const BASE_BACKOFF: Duration = Duration::from_millis(250);
/// A `Retry-After` longer than this is not waited for in full (the tool has a 30 s budget).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read from NCBI (10 abstracts are far below this).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

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

impl Failure {
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Failure::Connect | Failure::Timeout | Failure::Transport => true,
            Failure::Status(code) => *code == 429 || (500..600).contains(code),
            Failure::TooLarge => false,
        }
    }
}

/// Spaces requests at least `interval` apart, across every task that shares it.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    next_slot: Mutex<Option<Instant>>,
}

impl Pacer {
    pub fn per_second(rate: u32) -> Self {
        let rate = rate.max(1);
        Self { interval: Duration::from_secs(1) / rate, next_slot: Mutex::new(None) }
    }

    /// Wait for this caller's slot. The slot is reserved under the lock and waited for outside
    /// it, so callers queue in order without holding the lock while they sleep.
    pub async fn wait(&self) {
        let slot = {
            let mut next = self.next_slot.lock().await;
            let now = Instant::now();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// The E-utilities endpoint and the parameters every request carries.
pub struct Eutils {
    http: reqwest::Client,
    base: Url,
    pacer: Pacer,
    /// `tool`, `email`, `api_key`: NCBI's identification parameters.
    identity: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for Eutils {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `identity` holds the API key.
        f.debug_struct("Eutils").field("base", &self.base.as_str()).field("pacer", &self.pacer).finish()
    }
}

impl Eutils {
    /// `base` is the E-utilities root (".../entrez/eutils"); `rate` requests per second.
    pub fn new(base: &str, identity: Vec<(&'static str, String)>, rate: u32) -> Result<Self, String> {
        let mut base = Url::parse(base).map_err(|e| format!("base_url is not a URL: {e}"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err("base_url must be http or https".into());
        }
        // Url::join replaces the last segment unless the path ends with '/'.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("voxgate/", env!("CARGO_PKG_VERSION")))
            // Only ever talk to the configured base URL (TOOLS.md allow-list rule).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {}", e.without_url()))?;
        Ok(Self { http, base, pacer: Pacer::per_second(rate), identity })
    }

    /// GET `<base>/<endpoint>` with `params` plus the identity parameters; the body as text.
    /// Retries transient failures; each attempt waits for its slot in the shared pacer.
    pub async fn get(&self, endpoint: &str, params: &[(&str, String)]) -> Result<String, Failure> {
        let url = self.base.join(endpoint).map_err(|_| Failure::Transport)?;
        let mut attempt = 1;
        loop {
            self.pacer.wait().await;
            let result = self.attempt(url.clone(), params).await;
            match result {
                Ok(body) => return Ok(body),
                Err((failure, retry_after)) if failure.is_transient() && attempt < MAX_ATTEMPTS => {
                    let delay = retry_after.unwrap_or_else(|| backoff(attempt));
                    tracing::debug!(endpoint, attempt, error = %failure, "PubMed request failed; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err((failure, _)) => {
                    tracing::warn!(endpoint, attempt, error = %failure, "PubMed request failed");
                    return Err(failure);
                }
            }
        }
    }

    async fn attempt(&self, url: Url, params: &[(&str, String)]) -> Result<String, (Failure, Option<Duration>)> {
        let headers = crate::telemetry::trace_headers(&tracing::Span::current());
        let identity = self.identity.iter().map(|(k, v)| (*k, v.as_str()));
        let query: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).chain(identity).collect();
        let response =
            self.http.get(url).query(&query).headers(headers).send().await.map_err(|e| (classify(&e), None))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error())
                .then(|| retry_after(response.headers()))
                .flatten();
            return Err((Failure::Status(status.as_u16()), retry_after));
        }
        if response.content_length().is_some_and(|len| len > MAX_BODY_BYTES as u64) {
            return Err((Failure::TooLarge, None));
        }
        let bytes = response.bytes().await.map_err(|e| (classify(&e), None))?;
        if bytes.len() > MAX_BODY_BYTES {
            return Err((Failure::TooLarge, None));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// What went wrong, without the URL (it carries the API key).
pub(crate) fn classify(err: &reqwest::Error) -> Failure {
    if err.is_timeout() {
        Failure::Timeout
    } else if err.is_connect() {
        Failure::Connect
    } else {
        Failure::Transport
    }
}

/// `Retry-After` in seconds (NCBI sends seconds), capped.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let secs: u64 = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// 250 ms, 500 ms, … plus up to 50% jitter so that sessions retrying together spread out.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let base = BASE_BACKOFF * 2u32.saturating_pow(attempt.saturating_sub(1));
    let jitter = rand::rng().random_range(0..=base.as_millis() as u64 / 2);
    base + Duration::from_millis(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_are_the_retryable_ones() {
        assert!(Failure::Status(503).is_transient());
        assert!(Failure::Status(429).is_transient());
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

    #[tokio::test]
    async fn pacer_spaces_concurrent_callers() {
        let pacer = std::sync::Arc::new(Pacer::per_second(20));
        let start = Instant::now();
        let waits: Vec<_> = (0..5)
            .map(|_| {
                let pacer = pacer.clone();
                tokio::spawn(async move {
                    pacer.wait().await;
                    Instant::now()
                })
            })
            .collect();
        let mut times = Vec::new();
        for wait in waits {
            times.push(wait.await.unwrap() - start);
        }
        times.sort();
        // Five callers at 20/s: the last one goes 4 × 50 ms after the first.
        assert!(times[0] < Duration::from_millis(40), "{times:?}");
        assert!(times[4] >= Duration::from_millis(200), "{times:?}");
        assert!(times[4] - times[3] >= Duration::from_millis(45), "{times:?}");
    }

    #[test]
    fn base_url_is_checked_and_debug_hides_the_key() {
        assert!(Eutils::new("not a url", vec![], 3).is_err());
        assert!(Eutils::new("ftp://example.org/eutils", vec![], 3).is_err());
        let client = Eutils::new("http://127.0.0.1:1/eutils", vec![("api_key", "sekrit".into())], 3).unwrap();
        assert_eq!(client.base.as_str(), "http://127.0.0.1:1/eutils/");
        assert!(!format!("{client:?}").contains("sekrit"));
    }
}
