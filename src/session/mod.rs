//! The per-session bridge task and its tool-call state machine.
