//! A PDF's decoded size, bounded before the PDF is parsed.
//!
//! `pdf-extract` parses with lopdf, which inflates every compressed stream whole into memory
//! (object streams while loading, page contents while extracting) with no limit: a 10 MiB file
//! whose stream is 10 GB of zeros would exhaust the process's memory, and an allocation failure
//! aborts the process — no `catch_unwind` stops it, and every session goes down with it. So
//! before the parser sees a PDF, each stream is decoded here the way lopdf would decode it
//! (Flate, LZW, ASCII85, in the order its `/Filter` lists them), into a sink that counts bytes and
//! keeps none, and the document is refused once their total passes the budget.
//!
//! Every `stream` keyword that lopdf would take (spaces or tabs, then an end of line, after it)
//! starts a stream, wherever it stands. Its data is taken from there to the end of the file rather
//! than by `/Length` (which may be an indirect object) or the next `endstream` (which compressed
//! data may contain): every decoder stops at its own end-of-data marker, so what follows is never
//! decoded, and a stream cannot hide from the count by lying about where it ends. The data is
//! borrowed, never copied, so the work grows with the file, not with streams × file.
//!
//! The filters (and LZW's `/EarlyChange`) are read from the dictionary between the object's `obj`
//! and the keyword, as lopdf reads it ([`super::pdf_dict`]). A dictionary that cannot be read with
//! certainty is taken as possibly any filter chain, however long: its stream is decoded by every
//! filter, each output again by every filter, and counted by the largest result (see
//! [`decode_any`]).

use std::io::{self, Write};

use super::pdf_dict::{Filter, Unsure, filters};

/// Why a PDF is refused before parsing.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PdfGuardError {
    #[error("the document's streams decode to more than {limit} bytes")]
    TooLarge { limit: u64 },
}

/// How many filters deep every output of a stream with an unreadable dictionary is decoded again.
const GUESSED_CHAIN: u32 = 3;
/// Past [`GUESSED_CHAIN`], an output of at least this many bytes is decoded again too: lopdf
/// applies as many filters as the dictionary names, and wrappers that do not compress (stored
/// deflate blocks, ASCII85) cost a bomb nothing. What a filter makes of data it does not fit is
/// almost always shorter; a bomb's layers are longer (zlib of zlib of 64 MiB of zeros is ≈ 250
/// bytes, and one more zlib does not shrink it).
const FURTHER_LAYER: u64 = 16;
/// Outputs are not decoded again below this depth; no real PDF nests filters so. (Refusing a
/// stream that still decodes here refused real ones: LZW keeps most of a run of zeros, layer
/// after layer. A bomb hidden deeper is left to the extraction worker's limits.)
const MAX_GUESSED_CHAIN: u32 = 8;
/// The most decodes guessed for one stream, so that data several filters read at every depth
/// cannot make the work grow exponentially; past it the guessing stops (the worker's limits
/// again, not a refusal).
const MAX_GUESSES: u32 = 256;

/// Refuse `pdf` when its streams together decode to more than `budget` bytes.
pub fn check(pdf: &[u8], budget: u64) -> Result<(), PdfGuardError> {
    let mut left = budget;
    let mut from = 0;
    while let Some(at) = find(&pdf[from..], b"stream").map(|i| from + i) {
        from = at + b"stream".len();
        // `endstream` contains `stream`; a stream's data starts after `stream` and its end of line.
        if pdf[..at].ends_with(b"end") {
            continue;
        }
        // lopdf allows spaces and tabs before the end of line (`space0, eol`).
        let rest = &pdf[from..];
        let rest = &rest[rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count()..];
        let data = match rest {
            [b'\r', b'\n', rest @ ..] | [b'\n', rest @ ..] | [b'\r', rest @ ..] => rest,
            _ => continue,
        };
        left = match filters(&pdf[..at]) {
            Ok(filters) => decode_chain(data, &filters, left),
            Err(Unsure) => decode_any(data, 1, left, &mut { MAX_GUESSES }).map(|most| left - most),
        }
        .ok_or(PdfGuardError::TooLarge { limit: budget })?;
    }
    Ok(())
}

/// Decode `data` through `filters`, with at most `left` bytes out of each step; the budget left
/// after the last step, or `None` when it ran out. Intermediate output is kept only when another
/// filter follows (and is itself bounded by the budget).
fn decode_chain(data: &[u8], filters: &[Filter], left: u64) -> Option<u64> {
    let Some((last, first)) = filters.split_last() else { return Some(left) };
    let mut kept: Option<Vec<u8>> = None;
    for filter in first {
        let mut out = Capped::keeping(left);
        decode(*filter, kept.as_deref().unwrap_or(data), &mut out)?;
        kept = Some(out.kept);
    }
    let mut counted = Capped::counting(left);
    decode(*last, kept.as_deref().unwrap_or(data), &mut counted)?;
    Some(left - counted.written)
}

/// For a stream whose filters are unknown, at `depth` in the chain lopdf might apply: `data`
/// decoded by every filter (LZW both ways), and each output again — every non-empty one down to
/// [`GUESSED_CHAIN`] deep, below that those of [`FURTHER_LAYER`] bytes or more, down to
/// [`MAX_GUESSED_CHAIN`], while `guesses` last. Data a filter does not fit usually stops it within
/// a few bytes. The largest output, or `None` when one passed `left`. The outputs on one path are
/// held at once, so they share `left`.
fn decode_any(data: &[u8], depth: u32, left: u64, guesses: &mut u32) -> Option<u64> {
    const ALL: [Filter; 4] =
        [Filter::Flate, Filter::Lzw { early_change: true }, Filter::Lzw { early_change: false }, Filter::Ascii85];
    let mut most = 0;
    let mut lzw_before: Option<Vec<u8>> = None;
    for filter in ALL {
        let Some(fewer) = guesses.checked_sub(1) else { return Some(most) };
        *guesses = fewer;
        let mut out = Capped::keeping(left);
        decode(filter, data, &mut out)?;
        most = most.max(out.written);
        let further = if depth < GUESSED_CHAIN { out.written > 0 } else { out.written >= FURTHER_LAYER };
        // Zeros decode to nothing more by any filter but LZW, which keeps most of them; and the
        // two LZW readings of one stream often agree: the same output is followed once. Both
        // only save work.
        let all_zero = out.kept.iter().all(|&b| b == 0);
        let repeated = matches!(filter, Filter::Lzw { early_change: false }) && lzw_before.as_deref() == Some(&out.kept[..]);
        if matches!(filter, Filter::Lzw { early_change: true }) {
            lzw_before = Some(out.kept.clone());
        }
        if further && depth < MAX_GUESSED_CHAIN && !all_zero && !repeated {
            most = most.max(decode_any(&out.kept, depth + 1, left - out.written, guesses)?);
        }
    }
    Some(most)
}

/// Run one decoder into `out`; `None` when `out`'s cap was reached. A decoder error ends the
/// stream (lopdf keeps what it decoded up to the error), so it is not a refusal.
fn decode(filter: Filter, input: &[u8], out: &mut Capped) -> Option<()> {
    let result = match filter {
        Filter::Flate => flate(input, out),
        Filter::Lzw { early_change } => lzw(input, early_change, out),
        Filter::Ascii85 => ascii85(input, out),
    };
    // Any other decoder error ends the stream where lopdf would end it too.
    let _ended = result;
    if out.over { None } else { Some(()) }
}

fn flate(input: &[u8], out: &mut Capped) -> io::Result<u64> {
    let zlib = io::copy(&mut flate2::read::ZlibDecoder::new(input), out);
    // lopdf retries a stream whose zlib header or checksum is bad as raw deflate.
    if zlib.is_err() && out.written == 0 && input.len() > 2 && !out.over {
        return io::copy(&mut flate2::read::DeflateDecoder::new(&input[2..]), out);
    }
    zlib
}

fn lzw(input: &[u8], early_change: bool, out: &mut Capped) -> io::Result<u64> {
    // As lopdf decodes: codes widen one entry early unless `/EarlyChange 0`. Read the other way, a
    // stream goes wrong where the code width changes and stops with an error, a few KiB in.
    let mut decoder = if early_change {
        weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
    } else {
        weezl::decode::Decoder::new(weezl::BitOrder::Msb, 8)
    };
    let stream = decoder.into_stream(out);
    stream.decode_all(input).status.map(|_| 0)
}

/// ASCII85 as lopdf decodes it: white space skipped, `z` four zeros, to the first character
/// outside `!`..=`u` (the `~` of `~>` among them). Decoded, not just counted, since a filter may
/// follow. Where lopdf fails (a `z` inside a group, an overflowing group) this goes on: it may
/// count more than lopdf decodes, never less.
fn ascii85(input: &[u8], out: &mut Capped) -> io::Result<u64> {
    let mut chunk = Vec::with_capacity(8 * 1024);
    let (mut group, mut count) = (0u32, 0);
    for &b in input {
        match b {
            b'z' => chunk.extend_from_slice(&[0; 4]),
            b'!'..=b'u' => {
                group = group.wrapping_mul(85).wrapping_add(u32::from(b - b'!'));
                count += 1;
                if count == 5 {
                    chunk.extend_from_slice(&group.to_be_bytes());
                    (group, count) = (0, 0);
                }
            }
            b if b.is_ascii_whitespace() => {}
            _ => break,
        }
        if chunk.len() >= 8 * 1024 {
            out.write_all(&chunk)?;
            chunk.clear();
        }
    }
    if count > 0 {
        for _ in count..5 {
            group = group.wrapping_mul(85).wrapping_add(84);
        }
        chunk.extend_from_slice(&group.to_be_bytes()[..count - 1]);
    }
    out.write_all(&chunk)?;
    Ok(0)
}

/// A sink that counts what is written and stops at a cap, keeping the bytes only when asked.
struct Capped {
    cap: u64,
    written: u64,
    over: bool,
    keep: bool,
    kept: Vec<u8>,
}

impl Capped {
    fn counting(cap: u64) -> Self {
        Self { cap, written: 0, over: false, keep: false, kept: Vec::new() }
    }

    fn keeping(cap: u64) -> Self {
        Self { keep: true, ..Self::counting(cap) }
    }

    fn add(&mut self, n: u64) -> io::Result<u64> {
        self.written = self.written.saturating_add(n);
        if self.written > self.cap {
            self.over = true;
            return Err(io::Error::other("decoded size over the budget"));
        }
        Ok(n)
    }
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.add(buf.len() as u64)?;
        if self.keep {
            self.kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}
