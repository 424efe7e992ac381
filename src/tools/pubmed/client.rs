//! The HTTP side of `search_pubmed`: NCBI's request-rate limit shared by every session, on top of
//! the tools' shared HTTP helpers (`tools::http`: bounded retries, trace context, safe errors).
//!
//! NCBI allows 3 requests per second per client (10 with an API key) and blocks clients that go
//! over. The tool is one `Arc` shared by all sessions, so the [`Pacer`] inside it spaces *every*
//! request of the process, not each session's; a retried attempt waits for its slot too.
//!
//! The API key travels in the query string: only `http::Failure` (kind and status) is ever logged.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;
use url::Url;

use crate::tools::http::{self, Failure};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest body read from NCBI (10 abstracts are far below this).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Spaces requests at least `interval` apart, across every task that shares it.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    /// When the last caller was let through.
    last: Mutex<Option<Instant>>,
}

impl Pacer {
    pub fn per_second(rate: u32) -> Self {
        let rate = rate.max(1);
        Self { interval: Duration::from_secs(1) / rate, last: Mutex::new(None) }
    }

    /// Wait for this caller's turn. The lock is held while waiting: tokio's mutex is fair, so
    /// callers go in the order they came, and one that gives up (its call timed out, its session
    /// ended) leaves the queue when it is dropped. Only a caller that is let through moves the
    /// pacing on, so under overload abandoned callers do not reserve slots that push every later
    /// call past its deadline.
    pub async fn wait(&self) {
        let mut last = self.last.lock().await;
        if let Some(at) = *last {
            tokio::time::sleep_until(at + self.interval).await;
        }
        *last = Some(Instant::now());
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
        let base = http::base_url(base, "base_url")?;
        let http = http::client(REQUEST_TIMEOUT)?;
        Ok(Self { http, base, pacer: Pacer::per_second(rate), identity })
    }

    /// GET `<base>/<endpoint>` with `params` plus the identity parameters; the body as text.
    /// Retries transient failures; each attempt waits for its slot in the shared pacer.
    pub async fn get(&self, endpoint: &str, params: &[(&str, String)]) -> Result<String, Failure> {
        let url = self.base.join(endpoint).map_err(|_| Failure::Transport)?;
        let identity = self.identity.iter().map(|(k, v)| (*k, v.as_str()));
        let query: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).chain(identity).collect();
        let (client, pacer, url, query) = (&self.http, &self.pacer, &url, &query);
        let body = http::with_retries("PubMed", move || async move {
            pacer.wait().await;
            http::attempt(client.get(url.clone()).query(query), MAX_BODY_BYTES).await
        })
        .await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Under overload, callers that gave up (their call timed out) leave no slot behind: once
    /// they are gone, a fresh call is served within its own deadline, not after every slot the
    /// abandoned callers had reserved.
    #[tokio::test(start_paused = true)]
    async fn callers_that_gave_up_keep_no_slot() {
        let pacer = std::sync::Arc::new(Pacer::per_second(3));
        let deadline = Duration::from_secs(30);
        let callers: Vec<_> = (0..200)
            .map(|_| {
                let pacer = pacer.clone();
                tokio::spawn(async move { tokio::time::timeout(deadline, pacer.wait()).await.is_ok() })
            })
            .collect();
        let mut served = 0;
        for caller in callers {
            served += usize::from(caller.await.unwrap());
        }
        // 3 a second for 30 s; the rest timed out.
        assert!((85..=91).contains(&served), "{served} served");
        let start = Instant::now();
        assert!(tokio::time::timeout(deadline, pacer.wait()).await.is_ok(), "a fresh call timed out");
        assert!(start.elapsed() <= Duration::from_millis(334), "{:?}", start.elapsed());
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
