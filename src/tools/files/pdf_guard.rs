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
//! The stream data is taken from the `stream` keyword to the end of the file rather than by
//! `/Length` (which may be an indirect object) or the next `endstream` (which compressed data may
//! contain): every decoder stops at its own end-of-data marker, so what follows is never decoded,
//! and a stream cannot hide from the count by lying about where it ends.

use std::io::{self, Write};

/// Why a PDF is refused before parsing.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PdfGuardError {
    #[error("the document's streams decode to more than {limit} bytes")]
    TooLarge { limit: u64 },
}

/// A filter lopdf applies; others (images' DCT, JPX, CCITT) it leaves encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Flate,
    Lzw,
    Ascii85,
}

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
        let data = match &pdf[from..] {
            [b'\r', b'\n', rest @ ..] | [b'\n', rest @ ..] | [b'\r', rest @ ..] => rest,
            _ => continue,
        };
        let filters = filters(dictionary_before(&pdf[..at]));
        left = decode_chain(data, &filters, left).ok_or(PdfGuardError::TooLarge { limit: budget })?;
    }
    Ok(())
}

/// The text of the dictionary just before a `stream` keyword: back to the object's `obj`.
fn dictionary_before(head: &[u8]) -> &[u8] {
    const MAX_DICTIONARY: usize = 64 * 1024;
    let window = &head[head.len().saturating_sub(MAX_DICTIONARY)..];
    match rfind(window, b"obj") {
        Some(at) => &window[at..],
        None => window,
    }
}

/// The `/Filter` of a stream dictionary: one name or an array of names, in decoding order.
/// A filter that cannot be read is taken as Flate, the one nearly every PDF uses, so that a
/// dictionary written to confuse this reader is still counted.
fn filters(dictionary: &[u8]) -> Vec<Filter> {
    let Some(at) = find(dictionary, b"/Filter") else { return Vec::new() };
    let rest = &dictionary[at + b"/Filter".len()..];
    let rest = &rest[rest.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let names: Vec<&[u8]> = match rest.first() {
        Some(b'[') => {
            let end = rest.iter().position(|&b| b == b']').unwrap_or(rest.len());
            rest[1..end].split(|&b| b == b'/').skip(1).map(name).collect()
        }
        Some(b'/') => vec![name(&rest[1..])],
        _ => return vec![Filter::Flate],
    };
    names
        .into_iter()
        .filter_map(|n| match n {
            b"FlateDecode" | b"Fl" => Some(Filter::Flate),
            b"LZWDecode" | b"LZW" => Some(Filter::Lzw),
            b"ASCII85Decode" | b"A85" => Some(Filter::Ascii85),
            _ => None,
        })
        .collect()
}

/// A PDF name's characters, up to the next delimiter or white space.
fn name(text: &[u8]) -> &[u8] {
    let end = text
        .iter()
        .position(|b| b.is_ascii_whitespace() || b"/[]<>()%".contains(b))
        .unwrap_or(text.len());
    &text[..end]
}

/// Decode `data` through `filters`, with at most `left` bytes out of each step; the budget left
/// after the last step, or `None` when it ran out. Intermediate output is kept only when another
/// filter follows (and is itself bounded by the budget).
fn decode_chain(data: &[u8], filters: &[Filter], left: u64) -> Option<u64> {
    let Some((last, first)) = filters.split_last() else { return Some(left) };
    let mut input = data.to_vec();
    for filter in first {
        let mut kept = Capped::keeping(left);
        decode(*filter, &input, &mut kept)?;
        input = kept.kept;
    }
    let mut counted = Capped::counting(left);
    decode(*last, &input, &mut counted)?;
    Some(left - counted.written)
}

/// Run one decoder into `out`; `None` when `out`'s cap was reached. A decoder error ends the
/// stream (lopdf keeps what it decoded up to the error), so it is not a refusal.
fn decode(filter: Filter, input: &[u8], out: &mut Capped) -> Option<()> {
    let result = match filter {
        Filter::Flate => flate(input, out),
        Filter::Lzw => lzw(input, out),
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

fn lzw(input: &[u8], out: &mut Capped) -> io::Result<u64> {
    // As lopdf decodes (EarlyChange, its default, does not change how much comes out).
    let mut decoder = weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
    let stream = decoder.into_stream(out);
    stream.decode_all(input).status.map(|_| 0)
}

/// ASCII85 grows at most 4 bytes for each `z` and 4 for every 5 characters otherwise: counted,
/// not decoded.
fn ascii85(input: &[u8], out: &mut Capped) -> io::Result<u64> {
    let end = find(input, b"~>").unwrap_or(input.len());
    let zeros = input[..end].iter().filter(|&&b| b == b'z').count() as u64;
    let rest = (end as u64 - zeros) / 5 * 4;
    out.add(zeros * 4 + rest)
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::rfind(haystack, needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn pdf_with_stream(dictionary: &str, data: &[u8]) -> Vec<u8> {
        let mut pdf = format!("%PDF-1.7\n1 0 obj\n<< {dictionary} /Length {} >>\nstream\n", data.len()).into_bytes();
        pdf.extend_from_slice(data);
        pdf.extend_from_slice(b"\nendstream\nendobj\n%%EOF\n");
        pdf
    }

    #[test]
    fn a_stream_that_inflates_past_the_budget_is_refused() {
        // 64 MiB of zeros deflate to ≈ 64 KiB.
        let bomb = zlib(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let pdf = pdf_with_stream("/Filter /FlateDecode", &bomb);
        assert_eq!(check(&pdf, 16 << 20), Err(PdfGuardError::TooLarge { limit: 16 << 20 }));
        assert_eq!(check(&pdf, 128 << 20), Ok(()));
    }

    #[test]
    fn a_double_filter_is_decoded_step_by_step() {
        let inner = zlib(&vec![0u8; 64 << 20]);
        let twice = zlib(&inner);
        let pdf = pdf_with_stream("/Filter [/FlateDecode /FlateDecode]", &twice);
        assert!(check(&pdf, 16 << 20).is_err());
        assert_eq!(check(&pdf, 128 << 20), Ok(()));
    }

    #[test]
    fn the_budget_is_for_all_streams_together() {
        let one = pdf_with_stream("/Filter /FlateDecode", &zlib(&vec![b'a'; 6 << 20]));
        let mut three = one.clone();
        three.extend_from_slice(&one[9..]);
        three.extend_from_slice(&one[9..]);
        assert_eq!(check(&one, 16 << 20), Ok(()));
        assert!(check(&three, 16 << 20).is_err());
    }

    #[test]
    fn a_stream_is_counted_whatever_its_length_or_endstream_say() {
        // A lying /Length, and `endstream` early in the data (deflate's stored blocks carry it
        // as it is): the decoder reads to its own end.
        let mut plain = b"endstream".to_vec();
        plain.resize(20 << 20, 0);
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::none());
        encoder.write_all(&plain).unwrap();
        let data = encoder.finish().unwrap();
        assert!(find(&data, b"endstream").is_some_and(|at| at < 16));
        let pdf = pdf_with_stream("/Filter/FlateDecode /Length 3", &data);
        assert!(check(&pdf, 16 << 20).is_err());
        // An unreadable filter is taken as Flate.
        let pdf = pdf_with_stream("/Filter 5 0 R", &zlib(&vec![0u8; 64 << 20]));
        assert!(check(&pdf, 16 << 20).is_err());
    }

    #[test]
    fn lzw_and_ascii85_are_counted_too() {
        let mut lzw = Vec::new();
        weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
            .into_stream(&mut lzw)
            .encode_all(&vec![0u8; 32 << 20][..])
            .status
            .unwrap();
        assert!(check(&pdf_with_stream("/Filter /LZWDecode", &lzw), 16 << 20).is_err());
        assert_eq!(check(&pdf_with_stream("/Filter /LZWDecode", &lzw), 64 << 20), Ok(()));
        let zs = vec![b'z'; 5 << 20];
        assert!(check(&pdf_with_stream("/Filter /ASCII85Decode", &zs), 16 << 20).is_err());
    }

    #[test]
    fn ordinary_streams_and_uncompressed_ones_pass() {
        let text = b"BT /F1 12 Tf 72 712 Td (Hello) Tj ET";
        assert_eq!(check(&pdf_with_stream("/Filter /FlateDecode", &zlib(text)), 1 << 20), Ok(()));
        assert_eq!(check(&pdf_with_stream("", text), 1 << 20), Ok(()));
        assert_eq!(check(&pdf_with_stream("/Filter /DCTDecode", &[0xff, 0xd8, 0xff]), 1 << 20), Ok(()));
        assert_eq!(check(b"%PDF-1.7\nno streams here\n%%EOF", 1 << 20), Ok(()));
    }
}
