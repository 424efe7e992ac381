//! The log layer: text or JSON lines on stdout, filtered by `RUST_LOG` or `telemetry.log_level`.
//!
//! The filter applies to logs only, so `RUST_LOG=warn` quietens the console without turning off
//! trace export. What the lines may contain is the callers' rule: ids, codes, durations, no PHI;
//! libraries that would log payloads are capped whatever the filter says ([`LEVEL_CAPS`]).
//! Every line names the instance (`server.instance_id`) that wrote it: `instance=…` first on a
//! text line, an `"instance"` field in a JSON object — so logs of many pods can be told apart.

use std::io::IsTerminal;

use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{FilterExt, filter_fn};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use super::TelemetryError;
use super::traces::BoxedLayer;
use crate::config::{LogFormat, TelemetryConfig};

/// The environment variable that overrides `telemetry.log_level`.
const LOG_ENV: &str = "RUST_LOG";

/// The fmt layer for `config.log_format`, behind the effective filter.
pub(crate) fn layer(config: &TelemetryConfig) -> Result<BoxedLayer, TelemetryError> {
    let filter = filter(config)?.and(filter_fn(not_payload));
    let instance = config.instance_id.clone();
    let layer = match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            // Colour codes only for a person at a terminal, never into a collected log file.
            .with_ansi(std::io::stdout().is_terminal())
            .event_format(InstanceTagged::new(instance, format::format()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            // Event fields at the top level, the innermost span under "span" and the whole chain
            // under "spans", so a tool line carries its session.id: what log shippers index
            // without extra parsing.
            .event_format(InstanceTagged::new(
                instance,
                format::format().json().flatten_event(true).with_current_span(true).with_span_list(true),
            ))
            .with_filter(filter)
            .boxed(),
    };
    Ok(layer)
}

/// A line format that names the instance before the inner format's line: `instance=ID ` in
/// front of a text line, `"instance":"ID"` as the first field of a JSON object.
struct InstanceTagged<F> {
    /// Empty when the instance is not known (tests): lines stay as the inner format makes them.
    instance: String,
    /// The instance id as a JSON string, escaped once.
    instance_json: String,
    inner: F,
}

impl<F> InstanceTagged<F> {
    fn new(instance: String, inner: F) -> Self {
        let instance_json = serde_json::Value::String(instance.clone()).to_string();
        Self { instance, instance_json, inner }
    }
}

impl<S, N, F> FormatEvent<S, N> for InstanceTagged<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        if self.instance.is_empty() {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{\"instance\":{},{rest}", self.instance_json),
            None => write!(writer, "instance={} {line}", self.instance),
        }
    }
}

/// `RUST_LOG` when set and non-empty, else `telemetry.log_level`; a bad directive is an error that
/// names where it came from.
fn filter(config: &TelemetryConfig) -> Result<EnvFilter, TelemetryError> {
    let from_env = std::env::var(LOG_ENV).ok().filter(|value| !value.trim().is_empty());
    let (source, directives) = match from_env {
        Some(value) => (LOG_ENV, value),
        None => ("telemetry.log_level", config.log_level.clone()),
    };
    let filter = EnvFilter::try_new(&directives)
        .map_err(|err| TelemetryError::LogFilter { source_key: source, reason: err.to_string() })?;
    Ok(filter)
}

/// The most verbose `log` level the log filter can let through (`trace` when it cannot tell,
/// e.g. with span-field directives): crates that use `log` are cut off there, before the bridge.
pub(crate) fn log_max_level(config: &TelemetryConfig) -> Result<log::LevelFilter, TelemetryError> {
    use tracing::level_filters::LevelFilter;
    let level = match filter(config)?.max_level_hint() {
        Some(LevelFilter::OFF) => log::LevelFilter::Off,
        Some(LevelFilter::ERROR) => log::LevelFilter::Error,
        Some(LevelFilter::WARN) => log::LevelFilter::Warn,
        Some(LevelFilter::INFO) => log::LevelFilter::Info,
        Some(LevelFilter::DEBUG) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    Ok(level)
}

/// Libraries that log payloads, and the most verbose level of theirs that is written, whatever the
/// filter asks — also against a more specific directive such as `tungstenite::protocol=trace`,
/// which would win over any directive added to the `EnvFilter` — so turning on trace logging to
/// debug voxgate can never write PHI or tokens.
///
/// - The HTTP and WebSocket crates log whole frames, headers or bodies (transcripts, tool results)
///   at debug and trace: held at `info`.
/// - rmcp, the MCP client, logs every notification a server sends at `info` (progress messages,
///   the server's own log messages: either may name a patient), requests and results at `debug`,
///   whole messages at `trace`, and unexpected messages and error responses with their content at
///   `warn`: held at `error`, whose lines are I/O, transport and task failures. voxgate logs
///   what matters of an MCP server itself (connected, lost, tools left out), without content.
const LEVEL_CAPS: &[(&str, tracing::Level)] = &[
    ("tungstenite", tracing::Level::INFO),
    ("tokio_tungstenite", tracing::Level::INFO),
    ("hyper", tracing::Level::INFO),
    ("hyper_util", tracing::Level::INFO),
    ("h2", tracing::Level::INFO),
    ("reqwest", tracing::Level::INFO),
    ("rustls", tracing::Level::INFO),
    ("redis", tracing::Level::INFO),
    ("axum", tracing::Level::INFO),
    ("tower_http", tracing::Level::INFO),
    ("opentelemetry_otlp", tracing::Level::INFO),
    ("tonic", tracing::Level::INFO),
    ("rmcp", tracing::Level::ERROR),
];

/// False for anything a payload-logging crate emits beyond its cap.
fn not_payload(meta: &tracing::Metadata<'_>) -> bool {
    within_cap(meta.target(), *meta.level())
}

fn within_cap(target: &str, level: tracing::Level) -> bool {
    level_cap(target).is_none_or(|cap| level <= cap)
}

/// The cap of the crate `target` belongs to, if it has one (matched by crate, not by prefix).
fn level_cap(target: &str) -> Option<tracing::Level> {
    LEVEL_CAPS.iter().find_map(|(name, cap)| {
        target.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with("::")).then_some(*cap)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_bridge_stops_at_the_most_verbose_level_the_filter_allows() {
        // RUST_LOG would override the configured level; these cases need it unset.
        if std::env::var(LOG_ENV).is_ok_and(|v| !v.trim().is_empty()) {
            return;
        }
        let level = |directives: &str| {
            let config = TelemetryConfig { log_level: directives.into(), ..TelemetryConfig::default() };
            log_max_level(&config).unwrap()
        };
        assert_eq!(level("warn"), log::LevelFilter::Warn);
        assert_eq!(level("warn,voxgate::server=info"), log::LevelFilter::Info);
        assert_eq!(level("info,tantivy=debug"), log::LevelFilter::Debug);
        assert_eq!(level("off"), log::LevelFilter::Off);
    }

    #[test]
    fn payload_loggers_are_matched_by_crate_not_by_prefix() {
        assert!(level_cap("tungstenite").is_some());
        assert!(level_cap("tungstenite::protocol").is_some());
        assert!(level_cap("tokio_tungstenite::compat").is_some());
        assert!(level_cap("hyper_util::client::legacy").is_some());
        assert!(level_cap("hyperion").is_none());
        assert!(level_cap("voxgate::session").is_none());
    }

    #[test]
    fn the_mcp_client_writes_only_its_errors() {
        use tracing::Level;
        assert!(!within_cap("rmcp::service", Level::INFO), "received notification: progress messages");
        assert!(!within_cap("rmcp::service::client", Level::WARN), "unexpected message, with its content");
        assert!(within_cap("rmcp::transport::worker", Level::ERROR));
        assert!(within_cap("hyper::proto", Level::INFO) && !within_cap("hyper::proto", Level::DEBUG));
        assert!(within_cap("voxgate::mcp", Level::TRACE));
    }
}

#[cfg(test)]
mod instance_tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format;

    use super::InstanceTagged;

    /// Collects what the fmt layer writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn text(captured: &Captured) -> String {
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn every_line_names_the_instance_in_text_and_json() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_ansi(false)
            .event_format(InstanceTagged::new("vg-\"7\"".into(), format::format()))
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!(session.id = "vgs_1", "session started"));
        let line = text(&out);
        assert!(line.starts_with("instance=vg-\"7\" "), "{line}");
        assert!(line.contains("session started"), "{line}");

        let out = Captured::default();
        let json = format::format().json().flatten_event(true);
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(out.clone())
            .event_format(InstanceTagged::new("vg-\"7\"".into(), json))
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!(session.id = "vgs_1", "session started"));
        let value: serde_json::Value = serde_json::from_str(text(&out).trim()).unwrap();
        assert_eq!(value["instance"], "vg-\"7\"");
        assert_eq!(value["session.id"], "vgs_1");
    }

    #[test]
    fn without_an_instance_lines_are_unchanged() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_ansi(false)
            .event_format(InstanceTagged::new(String::new(), format::format()))
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!("hello"));
        assert!(!text(&out).contains("instance="), "{}", text(&out));
    }
}
