//! The client-facing HTTP and WebSocket endpoints (being wired).
pub mod assets;
