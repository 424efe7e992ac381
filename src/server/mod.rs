//! The client-facing HTTP and WebSocket endpoints.
