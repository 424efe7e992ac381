//! The process-wide drain signal.
