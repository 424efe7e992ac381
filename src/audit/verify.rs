//! `voxgate audit verify FILE`: the hash chain is unbroken across the file and its rotated
//! predecessors (keyed with `audit.chain_key` when it is set), sequence numbers have no gap,
//! checkpoints name the head they stand at, and every call has exactly one `call_started`
//! followed by exactly one `call_finished`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::AuditError;
use super::chain::Chain;
use super::record::{AuditEvent, AuditStatus, GENESIS, Line};

/// What verification found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub files: usize,
    pub lines: u64,
    pub calls: u64,
    pub abandoned: u64,
    /// Every break found, with its file and line number. Empty = the log is sound.
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_ok() { "OK" } else { "BROKEN" };
        writeln!(
            f,
            "{verdict}: {} file(s), {} line(s), {} call(s), {} abandoned",
            self.files, self.lines, self.calls, self.abandoned
        )?;
        for problem in &self.problems {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

/// The rotated predecessors of `path` (`<path>.<first>-<last>`), oldest first.
pub fn rotated_files(path: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Ok(Vec::new()) };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(Vec::new()) };
    let prefix = format!("{name}.");
    let mut rotated: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let file = e.file_name().to_str()?.to_string();
            let range = file.strip_prefix(&prefix)?;
            let (a, b) = range.split_once('-')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            (digits(a) && digits(b)).then(|| dir.join(file))
        })
        .collect();
    rotated.sort();
    Ok(rotated)
}

#[derive(Default)]
struct CallSeen {
    starts: u32,
    finishes: u32,
    where_: String,
}

/// Verify the log at `path` together with its rotated predecessors, linked by `chain`.
pub fn verify(path: &Path, chain: &Chain) -> Result<VerifyReport, AuditError> {
    let mut files = rotated_files(path)?;
    files.push(path.to_path_buf());
    let mut report = VerifyReport { files: files.len(), ..VerifyReport::default() };
    let mut prev = GENESIS.to_string();
    let mut expected_seq: Option<u64> = None;
    let mut calls: HashMap<(String, String), CallSeen> = HashMap::new();
    for file in &files {
        let text = std::fs::read(file).map_err(|e| AuditError::Io(format!("{}: {}", file.display(), e.kind())))?;
        let label = file.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        for (index, raw) in text.split(|b| *b == b'\n').enumerate() {
            if raw.is_empty() {
                continue;
            }
            let at = format!("{label}:{}", index + 1);
            report.lines += 1;
            let line: Line = match serde_json::from_slice(raw) {
                Ok(line) => line,
                Err(_) => {
                    report.problems.push(format!("{at}: not a valid audit record"));
                    prev = chain.link(raw);
                    continue;
                }
            };
            if line.prev_sha256 != prev {
                report.problems.push(format!("{at}: hash chain broken (prev_sha256 does not match the previous line)"));
            }
            if let Some(expected) = expected_seq
                && line.seq != expected
            {
                report.problems.push(format!("{at}: seq {} where {expected} was expected (lines missing or reordered)", line.seq));
            }
            expected_seq = Some(line.seq + 1);
            prev = chain.link(raw);
            if line.event == AuditEvent::Checkpoint {
                if line.chain_head.as_deref() != Some(line.prev_sha256.as_str()) {
                    report.problems.push(format!("{at}: checkpoint does not name the chain head"));
                }
                continue;
            }
            let seen = calls.entry((line.session_id.clone(), line.call_id.clone())).or_default();
            match line.event {
                AuditEvent::CallStarted => {
                    seen.starts += 1;
                    if seen.starts > 1 {
                        report.problems.push(format!("{at}: call {} started twice", line.call_id));
                    }
                    seen.where_ = at;
                }
                AuditEvent::CallFinished => {
                    seen.finishes += 1;
                    if seen.starts == 0 {
                        report.problems.push(format!("{at}: call {} finished without a start", line.call_id));
                    }
                    if seen.finishes > 1 {
                        report.problems.push(format!("{at}: call {} finished twice", line.call_id));
                    }
                    if line.status == Some(AuditStatus::Abandoned) {
                        report.abandoned += 1;
                    }
                }
                AuditEvent::CallApproved => {
                    if seen.starts == 0 || seen.finishes > 0 {
                        report.problems.push(format!("{at}: call {} approved outside its start and finish", line.call_id));
                    }
                }
                AuditEvent::Checkpoint => {}
            }
        }
    }
    report.calls = calls.len() as u64;
    let mut open: Vec<_> = calls.iter().filter(|(_, s)| s.starts > 0 && s.finishes == 0).collect();
    open.sort_by(|a, b| a.1.where_.cmp(&b.1.where_));
    for ((_, call_id), seen) in open {
        report.problems.push(format!("{}: call {call_id} has no finish", seen.where_));
    }
    Ok(report)
}
