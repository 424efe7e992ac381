//! The HTTP side of the WebDAV backend: one reqwest client with basic auth, bounded retries of
//! transient failures (the shared loop of `tools::http`, `with_retries`: connect errors, timeouts,
//! 5xx, 429 with `Retry-After`, with back-off and jitter; inside a tool call each attempt, its body
//! included, is cut off at what is left of the call's timeout, less a margin, rather than the
//! client's 20 s), W3C trace context on every request, bodies read under a byte cap, and the
//! server's health as last seen.
//!
//! Errors keep only the kind of failure and the status: a reqwest error's `Display` holds the URL,
//! which names the user's folder and file.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use url::Url;

use crate::config::Secret;
use crate::tools::http::{AttemptError, Failure, classify, read_capped, retry_after, with_retries};
use crate::tools::files::FilesError;
use crate::tools::files::backend::Health;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One request (a PROPFIND of a folder, a download up to the size cap).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// A WebDAV server with its credentials.
pub struct DavClient {
    http: reqwest::Client,
    username: Option<String>,
    password: Option<Secret>,
    health: AtomicU8,
}

impl std::fmt::Debug for DavClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DavClient")
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl DavClient {
    pub fn new(username: Option<String>, password: Option<Secret>) -> Result<Self, FilesError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("voxgate/", env!("CARGO_PKG_VERSION")))
            // Only ever talk to the configured server: a redirect could point anywhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| {
                FilesError::Config("backends.files: cannot build the HTTP client".into())
            })?;
        Ok(Self {
            http,
            username,
            password,
            health: AtomicU8::new(HEALTH_UNKNOWN),
        })
    }

    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            HEALTH_UP => Health::Up,
            HEALTH_UNREACHABLE => Health::Unreachable,
            HEALTH_REFUSED => Health::CredentialsRefused,
            _ => Health::Unknown,
        }
    }

    /// Send `method` to `url` and return a successful (2xx) answer, its body read whole (at most
    /// `max_bytes`). Transient failures are retried, each attempt within what is left of the call
    /// ([`with_retries`]); 401 becomes [`FilesError::CredentialsRefused`], 403
    /// [`FilesError::Forbidden`], 404 [`FilesError::NotFound`]. `reach` says whether a failure
    /// speaks for the whole server (`/readyz`) or only for one folder below the root.
    pub async fn send(
        &self,
        reach: Reach,
        method: Method,
        url: &Url,
        depth: Option<&'static str>,
        body: Option<&str>,
        max_bytes: u64,
    ) -> Result<Answer, FilesError> {
        // Read within the attempt: a body that stalls is cut off at the call's time left too.
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let outcome = with_retries("WebDAV", || self.attempt(&method, url, depth, body, cap))
            .await
            .map_err(|failure| files_error(failure, max_bytes));
        let health = match (&outcome, reach) {
            (Ok(_), _) => Some(HEALTH_UP),
            (Err(FilesError::CredentialsRefused), _) => Some(HEALTH_REFUSED),
            // An offline external storage (503) or a slow folder: the server itself answered the root.
            (Err(_), Reach::OneFolder) => None,
            (Err(FilesError::Unreachable(_)), Reach::Server) => Some(HEALTH_UNREACHABLE),
            (Err(_), Reach::Server) => Some(HEALTH_UP),
        };
        if let Some(health) = health {
            self.set_health(health);
        }
        outcome
    }

    async fn attempt(
        &self,
        method: &Method,
        url: &Url,
        depth: Option<&'static str>,
        body: Option<&str>,
        max_bytes: usize,
    ) -> Result<Answer, AttemptError> {
        let mut request = self
            .http
            .request(method.clone(), url.clone())
            .headers(crate::telemetry::trace_headers(&tracing::Span::current()));
        if let Some(user) = &self.username {
            request = request.basic_auth(user, self.password.as_ref().map(Secret::expose));
        }
        if let Some(depth) = depth {
            request = request.header("Depth", depth);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "text/xml; charset=utf-8")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|e| (classify(&e), None))?;
        let status = response.status();
        if !status.is_success() {
            // A 429 is retried only when the server says when (TOOLS.md: "429 with `Retry-After`").
            return Err((Failure::Status(status.as_u16()), retry_after(response.headers())));
        }
        let headers = response.headers().clone();
        let body = read_capped(response, max_bytes).await.map_err(|failure| (failure, None))?;
        Ok(Answer { headers, body: body.into() })
    }

    fn set_health(&self, value: u8) {
        self.health.store(value, Ordering::Relaxed);
    }
}

/// What a request's failure says about the server, for `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The root, a file, the SEARCH arbiter: a failure means the server is unusable.
    Server,
    /// One folder below the root during a walk: its failure leaves the rest of the server usable.
    OneFolder,
}

const HEALTH_UNKNOWN: u8 = 0;
const HEALTH_UP: u8 = 1;
const HEALTH_UNREACHABLE: u8 = 2;
const HEALTH_REFUSED: u8 = 3;

/// A successful answer: its headers and its whole body.
pub struct Answer {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// The files tools' terms for a request that failed for good (`max_bytes`: the cap it was read
/// under). No URL survives: a reqwest error's text names the user's folder and file.
fn files_error(failure: Failure, max_bytes: u64) -> FilesError {
    match failure {
        Failure::Status(401) => FilesError::CredentialsRefused,
        Failure::Status(403) => FilesError::Forbidden,
        Failure::Status(404 | 410) => FilesError::NotFound,
        Failure::Status(code) if (500..600).contains(&code) => FilesError::Unreachable("the server kept failing"),
        Failure::Status(code) => FilesError::Status(code),
        Failure::TooLarge => FilesError::TooLarge { limit: max_bytes },
        Failure::Timeout => FilesError::Unreachable("timed out"),
        Failure::Connect => FilesError::Unreachable("could not connect"),
        Failure::Transport => FilesError::Unreachable("transport error"),
    }
}
