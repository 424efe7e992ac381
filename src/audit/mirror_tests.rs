//! The mirror's reading of the log ([`super::reader`]): bounded batches, rotated files skipped by
//! the range in their names, and a place to read on from that survives a rotation. (Against Redis:
//! tests/audit_ops.rs.)

use std::path::Path;
use std::time::Duration;

use super::reader::{BATCH_LINES, log_files};
use super::*;

fn line(seq: u64) -> String {
    format!(r#"{{"seq":{seq},"event":"checkpoint","pad":"{}"}}"#, "x".repeat(40))
}

fn write_lines(file: &Path, seqs: std::ops::RangeInclusive<u64>) {
    let text: String = seqs.map(|seq| line(seq) + "\n").collect();
    std::fs::write(file, text).unwrap();
}

fn rotated(path: &Path, first: u64, last: u64) -> PathBuf {
    super::super::files::rotated_name(path, first, last)
}

/// A rotated file that must never be opened: opening a FIFO for reading blocks until a writer
/// comes, so a reader that opens it hangs (and the test fails on its time limit).
fn fifo(file: &Path) {
    assert!(std::process::Command::new("mkfifo").arg(file).status().unwrap().success());
}

/// Runs `read` on a thread of its own, failing the test if it does not return within 10 s.
fn within_limit<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read());
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("the read blocked (it opened a file it should have skipped)")
}

/// Every batch until the log is read up to `upto`, from `after`.
fn read_all(path: &Path, mut after: u64, upto: u64) -> Vec<Vec<(u64, String)>> {
    let mut batches = Vec::new();
    let mut cursor = None;
    loop {
        let (lines, next) = next_batch(path, after, upto, cursor);
        let Some(&(last, _)) = lines.last() else { break };
        after = last;
        cursor = next;
        batches.push(lines);
    }
    batches
}

#[test]
fn a_catch_up_reads_bounded_batches_and_skips_rotated_files_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    fifo(&rotated(&path, 1, 100));
    write_lines(&rotated(&path, 101, 200), 101..=200);
    write_lines(&path, 201..=1000);
    let batches = within_limit({
        let path = path.clone();
        move || read_all(&path, 150, 990)
    });
    assert!(batches.iter().all(|batch| batch.len() <= BATCH_LINES), "{:?}", batches.iter().map(Vec::len).collect::<Vec<_>>());
    let seqs: Vec<u64> = batches.iter().flatten().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (151..=990).collect::<Vec<_>>(), "every line once, in order, none past `upto`");
    assert!(batches.iter().flatten().all(|(seq, text)| *text == line(*seq)));
}

#[test]
fn a_line_is_looked_for_only_in_the_file_whose_name_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    fifo(&rotated(&path, 1, 100));
    write_lines(&rotated(&path, 101, 200), 101..=200);
    write_lines(&path, 201..=300);
    let found = within_limit({
        let path = path.clone();
        move || (line_at(&path, 150), line_at(&path, 250), line_at(&path, 301))
    });
    assert_eq!(found, (Some(line(150)), Some(line(250)), None));
}

/// The place a batch stopped at names the current file; if the file was rotated since, the
/// lines above it are in the rotated file and are read from there, then the new file's.
#[test]
fn a_place_in_a_file_rotated_since_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_lines(&path, 1..=10);
    let (first, cursor) = next_batch(&path, 0, 5, None);
    assert_eq!(first.len(), 5);
    std::fs::rename(&path, rotated(&path, 1, 10)).unwrap();
    write_lines(&path, 11..=40);
    let (lines, _) = next_batch(&path, 5, 40, cursor);
    assert_eq!(lines.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), (6..=10).collect::<Vec<_>>());
    let seqs: Vec<u64> = read_all(&path, 5, 40).into_iter().flatten().map(|(seq, _)| seq).collect();
    assert_eq!(seqs, (6..=40).collect::<Vec<_>>());
}

/// A line still being written (no newline yet) is not read, and the place stays before it.
#[test]
fn a_line_without_its_newline_is_left_for_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_lines(&path, 1..=3);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&line(4)[..10]);
    std::fs::write(&path, &text).unwrap();
    let (lines, cursor) = next_batch(&path, 0, 4, None);
    assert_eq!(lines.len(), 3);
    text.push_str(&line(4)[10..]);
    text.push('\n');
    std::fs::write(&path, &text).unwrap();
    let (lines, _) = next_batch(&path, 3, 4, cursor);
    assert_eq!(lines, [(4, line(4))]);
}

#[test]
fn epochs_after_the_first_get_their_own_key() {
    assert_eq!(epoch_stream("voxgate:audit:a", 1), "voxgate:audit:a");
    assert_eq!(epoch_stream("voxgate:audit:a", 2), "voxgate:audit:a:epoch2");
}

/// Before db7bdaf a rotation whose new file did not open left the writer appending to the renamed
/// file, past the last sequence number in its name. Those lines are read, not skipped by the name.
#[test]
fn lines_past_the_range_in_a_rotated_files_name_are_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    write_lines(&rotated(&path, 1, 10), 1..=15);
    write_lines(&rotated(&path, 16, 20), 16..=25);
    write_lines(&path, 26..=30);
    let seqs: Vec<u64> = read_all(&path, 12, 30).into_iter().flatten().map(|(seq, _)| seq).collect();
    assert_eq!(seqs, (13..=30).collect::<Vec<_>>());
    assert_eq!((line_at(&path, 13), line_at(&path, 23)), (Some(line(13)), Some(line(23))));
    // The newest rotated file too, whatever the file after it holds (here nothing yet).
    std::fs::write(&path, "").unwrap();
    let seqs: Vec<u64> = read_all(&path, 22, 30).into_iter().flatten().map(|(seq, _)| seq).collect();
    assert_eq!(seqs, (23..=25).collect::<Vec<_>>());
}

/// A catch-up into an empty stream this process never sent to starts the stream (said, not
/// counted); one that leaves lines out after the stream had lines is a gap, reported once.
#[test]
fn a_new_stream_starts_where_a_catch_up_begins_and_only_lines_left_out_after_it_are_a_gap() {
    // Nothing left out.
    assert_eq!(gap(0, None, 0, 0), Gap::None);
    assert_eq!(gap(300, Some(300), 0, 280), Gap::None);
    // A first start, or Redis and voxgate restarted together: the stream begins at 281.
    assert_eq!(gap(0, None, 0, 280), Gap::Start { first: 281 });
    // Redis came back empty under a process that had sent up to 300; 380 lines durable, maxlen 20.
    assert_eq!(gap(0, Some(300), 0, 380), Gap::Missed { first: 301, last: 380 });
    // A stream that stood at 300 when this process connected, and is now 100 lines behind.
    assert_eq!(gap(300, None, 0, 380), Gap::Missed { first: 301, last: 380 });
    // Reported once: a retry after the gap was said does not say it again.
    assert_eq!(gap(0, Some(300), 380, 380), Gap::None);
    assert_eq!(gap(0, None, 280, 280), Gap::None);
}

/// The newest rotated file runs up to the line before the current file's first, as the others run
/// up to the next one's, even when its own last line cannot be read (here a line longer than the
/// tail read for it): once the mirror is past it, it is skipped by name, not read again at every
/// flush. Lines past the range in its name are still read.
#[test]
fn the_newest_rotated_file_ends_before_the_current_files_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let newest = rotated(&path, 11, 20);
    write_lines(&rotated(&path, 1, 10), 1..=10);
    write_lines(&newest, 11..=22);
    let unreadable_end = std::fs::read_to_string(&newest).unwrap() + &"x".repeat(70 * 1024) + "\n";
    std::fs::write(&newest, &unreadable_end).unwrap();
    write_lines(&path, 23..=30);
    assert_eq!(log_files(&path)[1].1, Some((11, 22)));
    let seqs: Vec<u64> = read_all(&path, 0, 30).into_iter().flatten().map(|(seq, _)| seq).collect();
    assert_eq!(seqs, (1..=30).collect::<Vec<_>>());
    // Past it, it is not opened again.
    std::fs::remove_file(&newest).unwrap();
    fifo(&newest);
    let (lines, _) = within_limit({
        let path = path.clone();
        move || next_batch(&path, 22, 30, None)
    });
    assert_eq!(lines.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), (23..=30).collect::<Vec<_>>());
    // Neither end known (the current file has no complete line yet): its range is not bounded
    // above, so that lines past its name's range are not skipped.
    std::fs::remove_file(&newest).unwrap();
    std::fs::write(&newest, &unreadable_end).unwrap();
    std::fs::write(&path, &line(23)[..10]).unwrap();
    assert_eq!(log_files(&path)[1].1, Some((11, u64::MAX)));
}
