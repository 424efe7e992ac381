//! Frame classification: pass through untouched, or inspect (peek at `type` only).
