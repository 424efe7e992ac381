//! `voxgate audit verify FILE`: the hash chain is unbroken across the file and its rotated
//! predecessors (keyed with `audit.chain_key` when it is set), sequence numbers have no gap,
//! checkpoints name the head they stand at, and every call has exactly one `call_started`
//! followed by exactly one `call_finished`, and is not started again after it. Rotated files
//! archived away are not a break: the chain starts at the first line left, and finishes (or
//! approvals) whose start was in an archived file are reported as information, as is a current
//! file missing after a crash between a rotation's rename and the new file's open (it is empty).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

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
    /// Information, not breaks: where the chain starts when earlier files are not present, the
    /// calls whose start was in them, a missing current file.
    pub notes: Vec<String>,
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
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
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

/// The names of the `<path>.torn-*` files beside the log, sorted.
fn set_aside_files(path: &Path) -> Vec<String> {
    let (Some(name), Some(dir)) = (path.file_name().and_then(|n| n.to_str()), path.parent()) else { return Vec::new() };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{name}{}", super::files::SET_ASIDE_INFIX);
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<String> =
        entries.filter_map(Result::ok).filter_map(|e| e.file_name().to_str().filter(|n| n.starts_with(&prefix)).map(str::to_string)).collect();
    found.sort();
    found
}

/// Verify the log at `path` together with its rotated predecessors, linked by `chain`.
pub fn verify(path: &Path, chain: &Chain) -> Result<VerifyReport, AuditError> {
    check(path, chain).map(|(report, _)| report)
}

/// [`verify`], and the most calls it kept in memory at once: only open calls are kept whole (a call
/// is let go at its finish, leaving a 16-byte [`call_digest`] to catch a start of it again) and
/// files are read a line at a time, so a daily run over years of kept rotations needs memory for
/// the calls in flight, and 16 bytes (about 32 in the set) per call in the history.
pub(super) fn check(path: &Path, chain: &Chain) -> Result<(VerifyReport, usize), AuditError> {
    let mut files = rotated_files(path)?;
    let rotated = files.len();
    files.push(path.to_path_buf());
    let mut report = VerifyReport { files: files.len(), ..VerifyReport::default() };
    // Lines a start set aside (`recovery::set_aside`) are out of the chain: whether they were
    // ever acknowledged is for a person to judge, so they keep the log from reading as sound.
    for aside in set_aside_files(path) {
        report.problems.push(format!(
            "{aside}: lines a start set aside because they did not parse (a power loss during a write, or damage); \
             inspect them (docs/audit.md), then move the file away"
        ));
    }
    // The link the next line must carry; `None` before the first line, which sets where the chain
    // starts: genesis, or (the oldest rotations archived) wherever the first file left begins.
    let mut prev: Option<String> = None;
    // The chain does not start at genesis: a finish may have its start in a file not present.
    let mut archived = false;
    let mut expected_seq: Option<u64> = None;
    // Each open call, with where it started.
    let mut calls: HashMap<(String, String), String> = HashMap::new();
    // Calls seen finished in this file and the one before it: a `call_started` of one of them is
    // a second call under its id. Two files, not the whole history, so that memory stays bounded
    // by the rotation size over years of kept rotations (a start again further apart is missed).
    let mut finished: HashSet<u128> = HashSet::new();
    let mut most = 0;
    let mut raw = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let finished_before = std::mem::take(&mut finished);
        let failed = |e: std::io::Error| AuditError::Io(format!("{}: {}", file.display(), e.kind()));
        let label = file.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let opened = match File::open(file) {
            Ok(opened) => opened,
            // A crash between a rotation's rename and the new file's open: nothing is lost, the
            // next start creates it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && i == rotated && rotated > 0 => {
                report.files -= 1;
                report.notes.push(format!("{label}: not present (a crash after a rotation); taken as empty"));
                continue;
            }
            Err(e) => return Err(failed(e)),
        };
        let mut reader = BufReader::new(opened);
        let mut index = 0;
        loop {
            raw.clear();
            if reader.read_until(b'\n', &mut raw).map_err(failed)? == 0 {
                break;
            }
            index += 1;
            if raw.last() == Some(&b'\n') {
                raw.pop();
            }
            if raw.is_empty() {
                continue;
            }
            let at = format!("{label}:{index}");
            report.lines += 1;
            let line: Line = match serde_json::from_slice(&raw) {
                Ok(line) => line,
                Err(_) => {
                    report.problems.push(format!("{at}: not a valid audit record"));
                    prev = Some(chain.link(&raw));
                    continue;
                }
            };
            match &prev {
                None if line.prev_sha256 != GENESIS => {
                    archived = true;
                    report.notes.push(format!(
                        "{at}: chain starts at seq {} (prev_sha256 {}): earlier files not present",
                        line.seq, line.prev_sha256
                    ));
                }
                None => {}
                Some(prev) if *prev != line.prev_sha256 => {
                    report.problems.push(format!("{at}: hash chain broken (prev_sha256 does not match the previous line)"));
                }
                Some(_) => {}
            }
            if let Some(expected) = expected_seq
                && line.seq != expected
            {
                report.problems.push(format!("{at}: seq {} where {expected} was expected (lines missing or reordered)", line.seq));
            }
            expected_seq = Some(line.seq + 1);
            prev = Some(chain.link(&raw));
            let call = (line.session_id, line.call_id);
            match line.event {
                AuditEvent::Checkpoint => {
                    if line.chain_head.as_deref() != Some(line.prev_sha256.as_str()) {
                        report.problems.push(format!("{at}: checkpoint does not name the chain head"));
                    }
                }
                AuditEvent::CallStarted => {
                    if calls.contains_key(&call) {
                        report.problems.push(format!("{at}: call {} started twice", call.1));
                    } else if finished.contains(&call_digest(&call)) || finished_before.contains(&call_digest(&call)) {
                        // Held open again, so its second finish is not reported a second time.
                        report.problems.push(format!("{at}: call {} started again after its finish", call.1));
                    } else {
                        report.calls += 1;
                    }
                    calls.insert(call, at);
                    most = most.max(calls.len());
                }
                AuditEvent::CallFinished => {
                    // The call is over: let it go. A second finish then finds no start.
                    finished.insert(call_digest(&call));
                    if calls.remove(&call).is_none() {
                        if archived {
                            report.notes.push(format!("{at}: call {} finished; its start is in an earlier file not present", call.1));
                        } else {
                            report.problems.push(format!("{at}: call {} finished twice, or without a start", call.1));
                        }
                    }
                    if line.status == Some(AuditStatus::Abandoned) {
                        report.abandoned += 1;
                    }
                }
                AuditEvent::CallApproved => {
                    if !calls.contains_key(&call) {
                        if archived {
                            report.notes.push(format!("{at}: call {} approved; its start is in an earlier file not present", call.1));
                        } else {
                            report.problems.push(format!("{at}: call {} approved outside its start and finish", call.1));
                        }
                    }
                }
            }
        }
    }
    let mut open: Vec<_> = calls.iter().collect();
    open.sort_by(|a, b| a.1.cmp(b.1));
    for ((_, call_id), started) in open {
        report.problems.push(format!("{started}: call {call_id} has no finish"));
    }
    Ok((report, most))
}

/// A call's key in the set of finished calls: 128 bits of SHA-256 over its session and call id
/// (length-prefixed, so no two pairs share an input). A collision, which would report a start
/// as a restart, needs about 2^64 calls.
fn call_digest((session_id, call_id): &(String, String)) -> u128 {
    let mut hash = Sha256::new();
    hash.update((session_id.len() as u64).to_le_bytes());
    hash.update(session_id.as_bytes());
    hash.update(call_id.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}
