//! The mirror's reading of the log: its files in order with the sequence range each holds (by the
//! names of rotated files), one line looked up by its number, and bounded batches of lines read on
//! from a place in a file that survives a rotation. Lines are read by their `seq` alone, on a
//! blocking thread (see [`super::catch_up`]).

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Lines read from the log and sent per batch, at most: what a catch-up holds at once.
pub(super) const BATCH_LINES: usize = 256;
/// Bytes of lines per batch, at most (lines are well under 1 KiB; this bounds odd ones).
const BATCH_BYTES: usize = 1 << 20;

/// Bytes read to find a file's first or last line: far more than a line's length (well under
/// 1 KiB).
const LINE_MAX: u64 = 64 * 1024;

/// A place in one file of the log: the byte offset just after the last line read from it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cursor {
    file: PathBuf,
    offset: u64,
}

/// The one field of a line that reading needs: skipping a line allocates nothing.
#[derive(serde::Deserialize)]
struct Seq {
    seq: u64,
}

/// The log's files in order, rotated ones with the sequence range they hold, the current one last
/// with none. A rotated file's name (`<path>.<first>-<last>`) gives its range, but before db7bdaf a
/// rotation whose new file did not open left the writer appending to the renamed file, past the
/// `last` in its name, up to the line before the next file's first: the range runs to there (the
/// next name's `first`; for the newest rotated file the current file's first line, else its own
/// last line), so those lines are read. Only when neither is known is the newest one's range not
/// bounded above: while the current file has no complete line, no line past the rotated file is
/// durable, so the mirror is not past it and does not read it again at every flush.
pub(super) fn log_files(path: &Path) -> Vec<(PathBuf, Option<(u64, u64)>)> {
    let range = |file: &Path| {
        let (_, range) = file.file_name()?.to_str()?.rsplit_once('.')?;
        let (first, last) = range.split_once('-')?;
        Some((first.parse().ok()?, last.parse().ok()?))
    };
    let mut files: Vec<_> = super::super::verify::rotated_files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|file| {
            let seqs = range(&file);
            (file, seqs)
        })
        .collect();
    let next_firsts: Vec<Option<u64>> = files.iter().skip(1).map(|(_, seqs)| seqs.map(|(first, _)| first)).collect();
    let count = files.len();
    for (i, (file, seqs)) in files.iter_mut().enumerate() {
        let Some((first, last)) = *seqs else { continue };
        let end = match next_firsts.get(i).copied().flatten() {
            Some(next) => next.saturating_sub(1),
            // Unknown (no line found at either end): the range is not bounded above.
            None if i + 1 == count => {
                first_line(path).map(|next| next.saturating_sub(1)).or_else(|| last_line(file)).unwrap_or(u64::MAX)
            }
            None => last,
        };
        *seqs = Some((first, last.max(end)));
    }
    files.push((path.to_path_buf(), None));
    files
}

/// The sequence number of the first line of `file`, if it is complete. Not `files::first_seq`,
/// which parses the whole record: the mirror reads lines by their sequence number alone.
fn first_line(file: &Path) -> Option<u64> {
    let mut first = Vec::new();
    BufReader::new(std::io::Read::take(std::fs::File::open(file).ok()?, LINE_MAX)).read_until(b'\n', &mut first).ok()?;
    serde_json::from_slice::<Seq>(first.strip_suffix(b"\n")?).ok().map(|line| line.seq)
}

/// The sequence number of the last complete line of `file`, read from its end.
fn last_line(file: &Path) -> Option<u64> {
    let mut handle = std::fs::File::open(file).ok()?;
    let len = handle.metadata().ok()?.len();
    handle.seek(SeekFrom::Start(len.saturating_sub(LINE_MAX))).ok()?;
    let mut tail = Vec::new();
    std::io::Read::read_to_end(&mut handle, &mut tail).ok()?;
    let complete = &tail[..tail.iter().rposition(|&b| b == b'\n')?];
    complete.split(|&b| b == b'\n').rev().find_map(|line| serde_json::from_slice::<Seq>(line).ok()).map(|line| line.seq)
}

/// The log's line numbered `seq`, looked for only in the files whose range holds it.
pub(super) fn line_at(path: &Path, seq: u64) -> Option<String> {
    for (file, range) in log_files(path) {
        if range.is_some_and(|(first, last)| seq < first || seq > last) {
            continue;
        }
        if let Some((lines, _)) = read_lines(&file, 0, seq.saturating_sub(1), seq, 1)
            && let Some((found, line)) = lines.into_iter().next()
            && found == seq
        {
            return Some(line);
        }
    }
    None
}

/// The next batch of lines above `after` and up to `upto` (the last durable one: lines past it may
/// still be cut back), and the place after the last of them. Rotated files wholly at or below
/// `after` are skipped by name; `hint` (where the last batch stopped) is read on from when its
/// first line continues the sequence, else its file is read from the start.
pub(super) fn next_batch(path: &Path, after: u64, upto: u64, hint: Option<Cursor>) -> (Vec<(u64, String)>, Option<Cursor>) {
    for (file, range) in log_files(path) {
        if range.is_some_and(|(_, last)| last <= after) {
            continue;
        }
        let start = hint.as_ref().filter(|hint| hint.file == file).map_or(0, |hint| hint.offset);
        let mut read = read_lines(&file, start, after, upto, BATCH_LINES);
        let continues = |read: &Option<(Vec<(u64, String)>, u64)>| {
            read.as_ref().is_some_and(|(lines, _)| lines.first().is_none_or(|(seq, _)| *seq == after + 1))
        };
        if start > 0 && !continues(&read) {
            // Not the file the offset was in (it was rotated meanwhile).
            read = read_lines(&file, 0, after, upto, BATCH_LINES);
        }
        let Some((lines, end)) = read else { continue };
        if !lines.is_empty() || range.is_none() {
            return (lines, Some(Cursor { file, offset: end }));
        }
    }
    (Vec::new(), None)
}

/// Up to `max` complete lines of `file` from byte `offset` with a sequence number above `after`
/// and up to `upto`, read one at a time, and the offset just after the last line read. `None`
/// when the file is gone or shorter than `offset`.
fn read_lines(file: &Path, offset: u64, after: u64, upto: u64, max: usize) -> Option<(Vec<(u64, String)>, u64)> {
    let mut handle = std::fs::File::open(file).ok()?;
    if handle.metadata().ok()?.len() < offset {
        return None;
    }
    handle.seek(SeekFrom::Start(offset)).ok()?;
    let mut reader = BufReader::new(handle);
    let (mut out, mut bytes, mut end) = (Vec::new(), 0usize, offset);
    let mut raw = Vec::new();
    while out.len() < max && bytes < BATCH_BYTES {
        raw.clear();
        // A line without its newline is still being written (or was cut short by a crash).
        let Ok(read) = reader.read_until(b'\n', &mut raw) else { break };
        let Some(body) = raw.strip_suffix(b"\n") else { break };
        if let Ok(line) = serde_json::from_slice::<Seq>(body) {
            if line.seq > upto {
                break;
            }
            if line.seq > after {
                out.push((line.seq, String::from_utf8_lossy(body).into_owned()));
                bytes += body.len();
            }
        }
        end += read as u64;
    }
    Some((out, end))
}
