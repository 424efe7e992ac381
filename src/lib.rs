//! voxgate: a realtime voice-session proxy that owns the tools.
//!
//! A browser (or any OpenAI Realtime client) opens a WebSocket to voxgate; for each session voxgate
//! opens a WebSocket to an OpenAI Realtime-compatible server and bridges the two. Audio and every
//! event voxgate has no business with pass through as the same bytes. Server-owned tools are
//! injected into the session, their calls are intercepted, validated, checked against policy,
//! parked for in-band confirmation where they carry risk, audited exactly once, and answered.
//!
//! # Layout
//! - [`config`]: the typed configuration, TOML file plus `VOXGATE_<SECTION>__<KEY>` overlay.
//! - [`server`]: the client-facing HTTP and WebSocket endpoints (axum).
//! - [`upstream`]: connecting to the realtime server (OpenAI, Azure, any URL) or the simulated model.
//! - [`protocol`]: classifying frames by peeking at `type`; the events voxgate reads and emits.
//! - [`session`]: the per-session bridge task and its sans-I/O tool-call state machine.
//! - [`tools`]: the `Tool` trait, the registry, one file (or folder) per tool family.
//! - [`mcp`]: MCP servers' tools offered as server tools, under the same policy and audit.
//! - [`policy`]: who may call what: principals, permissions, PHI rules, rate limits, confirmation.
//! - [`audit`]: the exactly-once, hash-chained audit log.
//! - [`cluster`]: many instances as one service: identity, the Redis session registry, caps, kills.
//! - [`telemetry`]: logs, Prometheus metrics and OpenTelemetry traces.
//! - [`shutdown`]: the process-wide drain signal.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod audit;
pub mod cluster;
pub mod config;
pub mod mcp;
pub mod policy;
pub mod protocol;
pub mod server;
pub mod session;
pub mod shutdown;
pub mod telemetry;
pub mod tools;
pub mod upstream;
