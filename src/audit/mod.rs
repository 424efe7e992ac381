//! The exactly-once, hash-chained audit log (CONTRACT §5).
//!
//! Every tool call gets one `call_started` line when voxgate accepts it and exactly one
//! `call_finished` line, written and fsynced before the result reaches the model. Lines are JSON,
//! each carrying `prev_sha256` (the hash of the line before), so any edit breaks the chain. One
//! writer task owns the file ([`writer`]); `voxgate audit verify` checks it ([`verify`]); with
//! `redis.url` every line is mirrored to the stream `voxgate:audit` ([`mirror`]), the file staying
//! the source of truth.

mod mirror;
pub mod record;
pub mod verify;
pub mod writer;

use std::path::Path;

pub use record::{AuditEvent, AuditRecord, AuditStatus, Confirmation};
pub use verify::{VerifyReport, verify};
pub use writer::{AuditHandle, AuditWriter, open};

/// Why the audit log could not be written or read. Never holds record contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    #[error("audit log I/O error: {0}")]
    Io(String),
    #[error("audit log is corrupt at line {line}")]
    Corrupt { line: u64 },
    #[error("the audit writer has stopped")]
    Closed,
}

/// The chain state at the end of the newest rotated predecessor of `path`, if any.
fn rotated_predecessor_state(path: &Path) -> Result<writer::ChainState, AuditError> {
    let mut state = writer::genesis();
    for file in verify::rotated_files(path)? {
        let text = std::fs::read(&file).map_err(|e| AuditError::Io(e.kind().to_string()))?;
        for raw in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let line: record::Line = serde_json::from_slice(raw).map_err(|_| AuditError::Corrupt { line: state.seq + 1 })?;
            state.seq = line.seq;
            state.prev = record::line_hash(raw);
            writer::track_open(&mut state.open, line);
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests;
