//! The OTLP span pipeline: exporter (http/protobuf or gRPC), batch processor on the tokio runtime,
//! tracer provider with `service.name`, and the `tracing-opentelemetry` layer that feeds it.
//!
//! Only spans named `voxgate.*` are exported, and never events: the attributes that can reach a
//! collector are exactly the fields declared in [`super::spans`], which hold no PHI.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{BatchConfigBuilder, SdkTracerProvider};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::{Layer, Registry};

use super::TelemetryError;
use crate::config::{OtlpProtocol, TelemetryConfig};

/// Prefix of every span name that may leave the process.
pub(crate) const EXPORTED_SPAN_PREFIX: &str = "voxgate.";

/// One export request (HTTP or gRPC) may take this long before it is abandoned.
const EXPORT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// A whole batch export, retries included, is bounded by this.
const BATCH_EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a finished span may wait in the queue before it is sent.
const SCHEDULED_DELAY: Duration = Duration::from_secs(1);
/// Spans buffered while the collector is slow or down; beyond this they are dropped (counted by
/// the SDK and logged once), so a dead collector costs memory only up to this bound.
const MAX_QUEUE_SIZE: usize = 8192;

pub(crate) type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync + 'static>;

/// Builds the tracer provider for `endpoint` and the layer that turns `voxgate.*` spans into OTel
/// spans. Needs a tokio runtime: the batch processor and the gRPC channel are spawned on it.
pub(crate) fn pipeline(
    config: &TelemetryConfig,
    endpoint: &str,
) -> Result<(BoxedLayer, SdkTracerProvider), TelemetryError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime);
    }
    let exporter = exporter(config.otlp_protocol, endpoint)?;
    let batch_config = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUE_SIZE)
        .with_scheduled_delay(SCHEDULED_DELAY)
        .with_max_export_timeout(BATCH_EXPORT_TIMEOUT)
        .build();
    // The async-runtime processor: `on_end` is a non-blocking `try_send` into a bounded channel and
    // the export runs in its own tokio task, so a session never waits on the collector.
    let processor = BatchSpanProcessor::builder(exporter, Tokio)
        .with_batch_config(batch_config)
        .build();
    let mut resource = Resource::builder().with_service_name(config.service_name.clone());
    if !config.instance_id.is_empty() {
        resource = resource.with_attribute(opentelemetry::KeyValue::new("service.instance.id", config.instance_id.clone()));
    }
    let resource = resource.build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("voxgate");

    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Source locations and thread names would all point at telemetry/spans.rs and tokio
        // workers: noise in Jaeger, so left out.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(filter_fn(|meta| {
            meta.is_span() && meta.name().starts_with(EXPORTED_SPAN_PREFIX)
        }))
        .boxed();
    Ok((layer, provider))
}

fn exporter(protocol: OtlpProtocol, endpoint: &str) -> Result<SpanExporter, TelemetryError> {
    let endpoint = endpoint.trim_end_matches('/');
    let built = match protocol {
        // An endpoint given in code is used verbatim (only the env var gets the signal path), so
        // the OTLP/HTTP path is appended here, as CONTRACT §1 describes.
        OtlpProtocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_timeout(EXPORT_REQUEST_TIMEOUT)
            .build(),
        OtlpProtocol::Grpc => SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.to_owned())
            .with_timeout(EXPORT_REQUEST_TIMEOUT)
            .build(),
    };
    built.map_err(|err| TelemetryError::Exporter(without_credentials(&err.to_string(), endpoint)))
}

/// `message` without the credentials `endpoint` may carry (user info, query, fragment): the
/// exporter's errors quote the endpoint as written, and URLs are only ever printed without them
/// (docs/config.md). Each is looked for as written in `endpoint` (the form the exporter quotes),
/// as the URL parser gives it (percent-encoded: `^` becomes `%5E`) and percent-decoded. Should
/// any still show, the exporter's details are left out altogether.
fn without_credentials(message: &str, endpoint: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(url) = url::Url::parse(endpoint) else {
        // Validation accepts only http(s) URLs; nothing to match the message against otherwise.
        return "(details hidden)".into();
    };
    let raw = RawParts::of(endpoint);
    let mut text = message.to_string();
    // The user name too: the whole user info as written, then as the parser gives it.
    let user = url.username();
    let parsed_userinfo = url.password().map_or_else(|| user.to_string(), |password| format!("{user}:{password}"));
    for userinfo in [raw.userinfo, Some(parsed_userinfo.as_str())].into_iter().flatten().filter(|u| !u.is_empty()) {
        text = text.replace(&format!("{userinfo}@"), &format!("{HIDDEN}@"));
    }
    let passwords = forms([raw.password, url.password()]);
    let queries = forms([raw.query, url.query()]);
    let fragments = forms([raw.fragment, url.fragment()]);
    for query in &queries {
        text = text.replace(&format!("?{query}"), &format!("?{HIDDEN}"));
    }
    for fragment in &fragments {
        text = text.replace(&format!("#{fragment}"), &format!("#{HIDDEN}"));
    }
    let secrets = passwords.iter().chain(&queries).chain(&fragments);
    if secrets.into_iter().any(|secret| text.contains(secret.as_str())) {
        return "(details hidden: they quote the endpoint's credentials)".into();
    }
    text
}

/// The non-empty forms of a secret: as written and as parsed (`given`), and each percent-decoded;
/// the longest first, so that a form that contains another is replaced whole.
fn forms<const N: usize>(given: [Option<&str>; N]) -> Vec<String> {
    let mut forms: Vec<String> = given.into_iter().flatten().flat_map(|form| {
        let decoded = percent_encoding::percent_decode_str(form).decode_utf8_lossy().into_owned();
        [form.to_string(), decoded]
    }).filter(|form| !form.is_empty()).collect();
    forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
    forms.dedup();
    forms
}

/// An endpoint's user info, password, query and fragment as written, before any parser
/// normalises them.
struct RawParts<'a> {
    userinfo: Option<&'a str>,
    password: Option<&'a str>,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> RawParts<'a> {
    fn of(endpoint: &'a str) -> RawParts<'a> {
        let (rest, fragment) = match endpoint.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (endpoint, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        // The authority runs from `://` to the path (a `\` starts it too in an http(s) URL); the
        // user info is what precedes its last `@`.
        let authority = rest.split_once("://").map(|(_, after)| after.split(['/', '\\']).next().unwrap_or(after));
        let userinfo = authority.and_then(|authority| authority.rsplit_once('@')).map(|(userinfo, _)| userinfo);
        let password = userinfo.and_then(|userinfo| userinfo.split_once(':')).map(|(_, password)| password);
        RawParts { userinfo, password, query, fragment }
    }
}

/// Flushes and shuts the provider down on a plain thread, waiting at most `limit`.
///
/// The SDK's flush and shutdown block until the batch task answers, so they must not run on a
/// runtime worker (a current-thread runtime would deadlock); a detached thread rather than
/// `spawn_blocking` so that an unreachable collector cannot hold up the runtime's own shutdown.
pub(crate) async fn shutdown_provider(provider: SdkTracerProvider, limit: Duration) -> bool {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("voxgate-otel-shutdown".into())
        .spawn(move || {
            if let Err(err) = provider.force_flush() {
                tracing::debug!(error = %err, "trace flush failed");
            }
            let result = provider.shutdown_with_timeout(limit);
            let _ = done_tx.send(result);
        });
    if spawned.is_err() {
        tracing::warn!("could not start the trace shutdown thread; unsent spans are lost");
        return false;
    }
    match tokio::time::timeout(limit, done_rx).await {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(err))) => {
            tracing::warn!(error = %err, "trace exporter shutdown failed; unsent spans are lost");
            false
        }
        Ok(Err(_)) => false,
        Err(_) => {
            tracing::warn!(
                limit_ms = limit.as_millis() as u64,
                "trace flush timed out; unsent spans are lost"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exporter's own errors may quote the endpoint (tonic's "endpoint '…' uses HTTPS but no
    /// TLS feature is enabled"): what reaches stderr must not carry its credentials.
    #[tokio::test]
    async fn an_exporter_error_never_carries_the_endpoints_credentials() {
        let Err(TelemetryError::Exporter(message)) = exporter(OtlpProtocol::Grpc, "https://collector:SECRET5@otel.example:4317/?token=SECRET6#SECRET7") else {
            panic!("gRPC over https cannot be built in this build");
        };
        assert!(!message.contains("SECRET"), "{message}");
        assert!(message.contains("otel.example"), "still says which endpoint: {message}");
    }

    /// The URL parser percent-encodes these in a password, the exporter quotes the endpoint as
    /// written (and refuses it: `http::Uri` does not take them): the written form is what must go.
    #[tokio::test]
    async fn a_password_the_url_parser_would_encode_is_hidden_as_written() {
        for special in ["^", "{", "|", "\"", "`"] {
            let password = format!("p{special}ss");
            let endpoint = format!("https://u:{password}@otel.example:4318/?k=q{special}S#f{special}F");
            let message = match exporter(OtlpProtocol::HttpProtobuf, &endpoint) {
                Err(TelemetryError::Exporter(message)) => message,
                Err(other) => panic!("{other:?}"),
                Ok(_) => panic!("{endpoint} was taken"),
            };
            assert!(!message.contains(&password), "{message}");
            assert!(!message.contains(&format!("q{special}S")), "{message}");
            assert!(!message.contains(&format!("f{special}F")), "{message}");
            assert!(message.contains("https://***@otel.example:4318"), "still says which endpoint: {message}");
        }
    }
}
