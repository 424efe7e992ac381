//! Logs, Prometheus metrics and OpenTelemetry traces.
