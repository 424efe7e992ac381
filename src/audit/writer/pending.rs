//! The lines made for the records the writer holds. A record is serialised once, when it first
//! joins a commit; its line (and the checkpoints among the held lines) stays here, and every retry
//! while the disk refuses writes writes these bytes again. Re-serialising the whole backlog on each
//! attempt made an outage's cost grow with the square of its length (up to 100,000 records
//! serialised per commit, several commits a second).
//!
//! Reusing the bytes verbatim keeps the chain valid: a line's `seq` and `prev_sha256` are fixed by
//! the lines before it, and a failed write moves neither the durable sequence nor the chain head, so
//! a retry would give each held line the same position and link again. Only a line whose record
//! changes (a `call_finished` rewritten as `audit_unavailable` under `fail_closed`, see
//! [`super::Writer::commit`]) is made again, with every line after it: they are the lines of that
//! one commit.

use super::super::AuditError;
use super::super::files::{FileOp, io};
use super::super::record::Line;
use super::Writer;

/// A buffer this large is given back once written (an outage's backlog), not kept for good.
const KEEP_BYTES: usize = 1 << 20;

/// The held lines, ready to write, and where the chain stands after the last of them.
pub(super) struct Pending {
    /// The lines, each with its newline, in log order.
    pub(super) bytes: Vec<u8>,
    /// `seq` of the last line here; the file's last when there is none.
    pub(super) seq: u64,
    /// The link to the last line here, for the next line's `prev_sha256`.
    pub(super) prev: String,
    /// Records since the last checkpoint, counting the lines here.
    pub(super) since: u64,
    /// A checkpoint is among the lines (the interval restarts once they are durable).
    pub(super) checkpointed: bool,
}

/// Where [`Pending`] stood before some lines were made, to take them back.
pub(super) struct Mark {
    len: usize,
    seq: u64,
    prev: String,
    since: u64,
    checkpointed: bool,
}

impl Pending {
    /// No lines held; the chain continues after `seq`, linked by `prev`.
    pub(super) fn new(seq: u64, prev: String, since: u64) -> Self {
        Pending { bytes: Vec::new(), seq, prev, since, checkpointed: false }
    }

    pub(super) fn mark(&self) -> Mark {
        Mark { len: self.bytes.len(), seq: self.seq, prev: self.prev.clone(), since: self.since, checkpointed: self.checkpointed }
    }

    /// Take back every line made after `mark`.
    pub(super) fn truncate(&mut self, mark: Mark) {
        self.bytes.truncate(mark.len);
        (self.seq, self.prev, self.since, self.checkpointed) = (mark.seq, mark.prev, mark.since, mark.checkpointed);
    }

    /// The lines are durable: the chain state stays, the bytes go.
    pub(super) fn written(&mut self) {
        if self.bytes.capacity() > KEEP_BYTES {
            self.bytes = Vec::new();
        } else {
            self.bytes.clear();
        }
        self.checkpointed = false;
    }
}

impl Writer {
    /// Make the lines of the held records up to `upto` not made yet (and the checkpoints due
    /// among them), then a timed checkpoint when `timed` and records came since the last.
    pub(super) fn prepare(&mut self, upto: usize, timed: bool) -> Result<(), AuditError> {
        while self.prepared < upto {
            let held = &self.backlog[self.prepared];
            let line = Line::made_at(held.record.clone(), held.made, self.pending.seq + 1, &self.instance, self.pending.prev.clone());
            self.push(&line)?;
            self.prepared += 1;
            self.pending.since += 1;
            if self.checkpoint_records > 0 && self.pending.since >= self.checkpoint_records {
                self.checkpoint()?;
            }
        }
        if timed && self.pending.since > 0 {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn checkpoint(&mut self) -> Result<(), AuditError> {
        self.push(&Line::checkpoint(self.pending.seq + 1, &self.instance, self.pending.prev.clone()))?;
        (self.pending.since, self.pending.checkpointed) = (0, true);
        Ok(())
    }

    /// Serialise `line` after the held lines; the chain moves on to it.
    fn push(&mut self, line: &Line) -> Result<(), AuditError> {
        self.fault(FileOp::Serialise).map_err(io)?;
        let start = self.pending.bytes.len();
        if serde_json::to_writer(&mut self.pending.bytes, line).is_err() {
            self.pending.bytes.truncate(start);
            return Err(AuditError::Io("serialising a record".into()));
        }
        self.pending.prev = self.chain.link(&self.pending.bytes[start..]);
        self.pending.seq = line.seq;
        self.pending.bytes.push(b'\n');
        Ok(())
    }
}
