//! The HTTP side of the WebDAV backend: one reqwest client with basic auth, bounded retries with
//! back-off and jitter for transient failures (connect errors, timeouts, 5xx, 429 with `Retry-After`), W3C trace
//! context on every request, bodies read under a byte cap, and the server's health as last seen.
//!
//! Errors keep only the kind of failure and the status: a reqwest error's `Display` holds the URL,
//! which names the user's folder and file.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use reqwest::{Method, Response, StatusCode};
use url::Url;

use crate::config::Secret;
use crate::tools::http::{retry_after, retry_delay};
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

    /// Send `method` to `url` and return a successful (2xx) response. Transient failures are
    /// retried; 401 becomes [`FilesError::CredentialsRefused`], 403 [`FilesError::Forbidden`], 404
    /// [`FilesError::NotFound`].
    pub async fn send(
        &self,
        method: Method,
        url: &Url,
        depth: Option<&'static str>,
        body: Option<&str>,
    ) -> Result<Response, FilesError> {
        let mut attempt = 1;
        loop {
            let started = tokio::time::Instant::now();
            let outcome = self.attempt(method.clone(), url.clone(), depth, body).await;
            let retry = match &outcome {
                Err((failure, after)) => retry_delay(failure.transient, *after, attempt, started.elapsed()),
                Ok(_) => None,
            };
            match (outcome, retry) {
                (Ok(response), _) => {
                    self.set_health(HEALTH_UP);
                    return Ok(response);
                }
                (Err((failure, _)), Some(delay)) => {
                    tracing::debug!(attempt, error = %failure.error, "WebDAV request failed; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                (Err((failure, _)), None) => {
                    self.set_health(match failure.error {
                        FilesError::Unreachable(_) => HEALTH_UNREACHABLE,
                        FilesError::CredentialsRefused => HEALTH_REFUSED,
                        _ => HEALTH_UP,
                    });
                    return Err(failure.error);
                }
            }
        }
    }

    async fn attempt(
        &self,
        method: Method,
        url: Url,
        depth: Option<&'static str>,
        body: Option<&str>,
    ) -> Result<Response, (Failure, Option<Duration>)> {
        let mut request = self
            .http
            .request(method, url)
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
        let response = request
            .send()
            .await
            .map_err(|e| (Failure::from_reqwest(&e), None))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        let failure = match status {
            StatusCode::UNAUTHORIZED => Failure::fatal(FilesError::CredentialsRefused),
            StatusCode::FORBIDDEN => Failure::fatal(FilesError::Forbidden),
            StatusCode::NOT_FOUND | StatusCode::GONE => Failure::fatal(FilesError::NotFound),
            // Retried only when the server says when (TOOLS.md: "429 with `Retry-After`").
            StatusCode::TOO_MANY_REQUESTS if retry_after.is_some() => Failure::transient(FilesError::Status(429)),
            s if s.is_server_error() => {
                Failure::transient(FilesError::Unreachable("the server kept failing"))
            }
            s => Failure::fatal(FilesError::Status(s.as_u16())),
        };
        Err((failure, retry_after))
    }

    fn set_health(&self, value: u8) {
        self.health.store(value, Ordering::Relaxed);
    }
}

const HEALTH_UNKNOWN: u8 = 0;
const HEALTH_UP: u8 = 1;
const HEALTH_UNREACHABLE: u8 = 2;
const HEALTH_REFUSED: u8 = 3;

/// A failed attempt and whether another one may help.
struct Failure {
    error: FilesError,
    transient: bool,
}

impl Failure {
    fn fatal(error: FilesError) -> Self {
        Self {
            error,
            transient: false,
        }
    }

    fn transient(error: FilesError) -> Self {
        Self {
            error,
            transient: true,
        }
    }

    /// What went wrong, without the URL.
    fn from_reqwest(err: &reqwest::Error) -> Self {
        if err.is_timeout() {
            Self::transient(FilesError::Unreachable("timed out"))
        } else if err.is_connect() {
            Self::transient(FilesError::Unreachable("could not connect"))
        } else {
            Self::transient(FilesError::Unreachable("transport error"))
        }
    }
}

/// Read a response body, at most `max_bytes` ([`crate::tools::http::read_capped`]), with the
/// failure in the files tools' terms.
pub async fn read_capped(response: Response, max_bytes: u64) -> Result<Vec<u8>, FilesError> {
    use crate::tools::http::Failure as Http;
    let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    match crate::tools::http::read_capped(response, cap).await {
        Ok(body) => Ok(body.into()),
        Err(Http::TooLarge) => Err(FilesError::TooLarge { limit: max_bytes }),
        Err(Http::Timeout) => Err(FilesError::Unreachable("timed out")),
        Err(Http::Connect) => Err(FilesError::Unreachable("could not connect")),
        Err(Http::Status(_) | Http::Transport) => Err(FilesError::Unreachable("transport error")),
    }
}

