//! The exactly-once, hash-chained audit log (CONTRACT §5).
//!
//! Every tool call gets one `call_started` line when voxgate accepts it and exactly one
//! `call_finished` line, written and fsynced before the result reaches the model. Lines are JSON,
//! each carrying `prev_sha256` (the hash of the line before), so any edit breaks the chain. One
//! writer task owns the file ([`writer`]); `voxgate audit verify` checks it ([`verify`]); with
//! `redis.url` every line is mirrored to the stream `audit.redis_stream` (by default
//! `voxgate:audit:{instance_id}`, trimmed to `audit.redis_stream_maxlen`; [`mirror`]), the file
//! staying the source of truth.

mod chain;
mod files;
mod health;
mod mirror;
pub mod record;
pub mod recovery;
pub mod verify;
pub mod writer;

pub use chain::Chain;
pub use record::{AuditEvent, AuditRecord, AuditStatus, Confirmation, Origin};
pub use recovery::{Recovered, Recovery};
pub use verify::{VerifyReport, verify};
pub use writer::{AuditHandle, AuditWriter, OpenOptions, open};

/// Why the audit log could not be written or read. Never holds record contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    #[error("audit log I/O error: {0}")]
    Io(String),
    #[error("audit log is corrupt at line {line}")]
    Corrupt { line: u64 },
    /// Another process holds the log's lock (`<path>.lock`): two writers on one file would cut
    /// each other's durable lines as torn tails.
    #[error("the audit log is in use by another process (its lock {0} is held)")]
    InUse(String),
    #[error("the audit writer has stopped")]
    Closed,
    /// The record could not be made durable (disk full, fsync error); it is held and retried.
    #[error("the audit log is not writable")]
    Unavailable,
}

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
