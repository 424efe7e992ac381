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
//! The filters are read from the dictionary between the object's `obj` and the keyword, tokenised
//! as lopdf tokenises it (`#xx` escapes in names, strings, nested dictionaries, the last key of
//! the outer dictionary). A dictionary that cannot be read with certainty — a comment, an `obj`
//! that is not the object's own, a `/Filter` that is not names, a repeated key — is taken as
//! possibly any filter chain: its stream is decoded by every filter, up to [`GUESSED_CHAIN`] deep,
//! and counted by the largest result.

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

/// How many filters deep a stream with an unreadable dictionary is decoded: a bomb needs at most
/// two (Flate of Flate reaches terabytes), and ASCII85 may wrap either.
const GUESSED_CHAIN: u32 = 3;
/// How far before `stream` its dictionary is looked for; a longer one is not read with certainty.
const MAX_DICTIONARY: usize = 64 * 1024;

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
            Err(Unsure) => decode_any(data, GUESSED_CHAIN, left),
        }
        .ok_or(PdfGuardError::TooLarge { limit: budget })?;
    }
    Ok(())
}

/// The dictionary before a `stream` keyword cannot be read with certainty.
#[derive(Debug)]
struct Unsure;

/// The `/Filter` of the stream whose `stream` keyword ends `head`, in decoding order, read from
/// the dictionary after the object's `obj`. lopdf decodes only when that is one name or an array
/// of names; names it does not decode are dropped.
fn filters(head: &[u8]) -> Result<Vec<Filter>, Unsure> {
    let window = &head[head.len().saturating_sub(MAX_DICTIONARY)..];
    let at = rfind(window, b"obj").ok_or(Unsure)?;
    // An `obj` after a `%` on its line is in a comment, and lopdf skips what follows on the line.
    match window[..at].iter().rposition(|&b| b == b'\n' || b == b'\r') {
        Some(eol) if !window[eol..at].contains(&b'%') => {}
        None if window.len() == head.len() && !window[..at].contains(&b'%') => {}
        _ => return Err(Unsure),
    }
    // Strings, names and nesting are tokenised as lopdf does, and the text from this `obj` must
    // hold exactly one dictionary: were the `obj` inside a string, name or the dictionary, lopdf's
    // dictionary would close after a `)` or `>>` this reading does not expect, or not at all.
    let mut lexer = Lexer { text: &window[at + b"obj".len()..], at: 0 };
    let Some(Token::DictOpen) = lexer.next()? else { return Err(Unsure) };
    let filter = dictionary(&mut lexer, 1)?;
    if lexer.next()?.is_some() {
        return Err(Unsure);
    }
    let names = match filter {
        None => return Ok(Vec::new()),
        Some(Value::Name(name)) => vec![name],
        Some(Value::Names(Some(names))) => names,
        Some(_) => return Err(Unsure),
    };
    Ok(names
        .iter()
        .filter_map(|name| match name.as_slice() {
            b"FlateDecode" | b"Fl" => Some(Filter::Flate),
            b"LZWDecode" | b"LZW" => Some(Filter::Lzw),
            b"ASCII85Decode" | b"A85" => Some(Filter::Ascii85),
            _ => None,
        })
        .collect())
}

/// A dictionary value, as far as a `/Filter` goes.
enum Value {
    Name(Vec<u8>),
    /// An array: its names when it holds nothing else.
    Names(Option<Vec<Vec<u8>>>),
    Other,
}

/// The rest of a dictionary after its `<<`, through its `>>`; its `/Filter` value at `depth` 1.
fn dictionary(lexer: &mut Lexer, depth: usize) -> Result<Option<Value>, Unsure> {
    let mut filter = None;
    loop {
        match lexer.next()?.ok_or(Unsure)? {
            Token::DictClose => return Ok(filter),
            Token::Name(key) => {
                let token = lexer.next()?.ok_or(Unsure)?;
                let value = value(lexer, token, depth)?;
                if depth == 1 && key == b"Filter" {
                    // lopdf keeps the last of repeated keys; two are a sign of mischief.
                    if filter.replace(value).is_some() {
                        return Err(Unsure);
                    }
                }
            }
            _ => return Err(Unsure),
        }
    }
}

/// The value that starts with `token`.
fn value(lexer: &mut Lexer, token: Token, depth: usize) -> Result<Value, Unsure> {
    const MAX_DEPTH: usize = 64;
    if depth > MAX_DEPTH {
        return Err(Unsure);
    }
    Ok(match token {
        Token::Name(name) => Value::Name(name),
        Token::Text => Value::Other,
        Token::Word(word) => {
            // `12 0 R` is one value, a reference.
            let back = lexer.at;
            let is_number = |word: &[u8]| word.iter().all(u8::is_ascii_digit);
            match (lexer.next()?, lexer.next()?) {
                (Some(Token::Word(generation)), Some(Token::Word(b"R")))
                    if is_number(word) && is_number(generation) => {}
                _ => lexer.at = back,
            }
            Value::Other
        }
        Token::DictOpen => {
            dictionary(lexer, depth + 1)?;
            Value::Other
        }
        Token::ArrayOpen => {
            let mut names = Some(Vec::new());
            loop {
                match lexer.next()?.ok_or(Unsure)? {
                    Token::ArrayClose => break Value::Names(names),
                    token => match value(lexer, token, depth + 1)? {
                        Value::Name(name) => {
                            if let Some(names) = &mut names {
                                names.push(name);
                            }
                        }
                        _ => names = None,
                    },
                }
            }
        }
        Token::DictClose | Token::ArrayClose => return Err(Unsure),
    })
}

/// A PDF token, as lopdf's parser splits them.
enum Token<'a> {
    DictOpen,
    DictClose,
    ArrayOpen,
    ArrayClose,
    /// A name, its `#xx` escapes decoded.
    Name(Vec<u8>),
    /// A literal or hexadecimal string.
    Text,
    /// A number, `true`, `false`, `null` or `R`.
    Word(&'a [u8]),
}

struct Lexer<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    /// The next token, `None` at the end; `Unsure` on a comment or a character lopdf would not
    /// read the same way in every context.
    fn next(&mut self) -> Result<Option<Token<'a>>, Unsure> {
        while self.text.get(self.at).is_some_and(|&b| is_space(b)) {
            self.at += 1;
        }
        let rest = &self.text[self.at..];
        let Some(&first) = rest.first() else { return Ok(None) };
        self.at += 1;
        Ok(Some(match first {
            b'<' if rest.starts_with(b"<<") => {
                self.at += 1;
                Token::DictOpen
            }
            b'>' if rest.starts_with(b">>") => {
                self.at += 1;
                Token::DictClose
            }
            b'[' => Token::ArrayOpen,
            b']' => Token::ArrayClose,
            b'(' => {
                self.literal_string()?;
                Token::Text
            }
            b'<' => {
                let end = rest.iter().position(|&b| b == b'>').ok_or(Unsure)?;
                if !rest[1..end].iter().all(|&b| b.is_ascii_hexdigit() || is_space(b)) {
                    return Err(Unsure);
                }
                self.at += end;
                Token::Text
            }
            b'/' => Token::Name(self.name()?),
            b'%' | b')' | b'>' | b'{' | b'}' => return Err(Unsure),
            _ => {
                let len = rest.iter().position(|&b| !is_regular(b)).unwrap_or(rest.len());
                // Numbers, `true`, `false`, `null`, `R`: nothing else is an object to lopdf. A
                // `\` must not pass: inside lopdf's string it escapes the `(` this would start.
                if !rest[..len].iter().all(|&b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
                    return Err(Unsure);
                }
                self.at += len - 1;
                Token::Word(&rest[..len])
            }
        }))
    }

    /// The rest of a literal string after its `(`: nested parentheses balance, `\` escapes one.
    fn literal_string(&mut self) -> Result<(), Unsure> {
        let mut depth = 1usize;
        while let Some(&b) = self.text.get(self.at) {
            self.at += 1;
            match b {
                b'\\' => self.at += 1,
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                return Ok(());
            }
        }
        Err(Unsure)
    }

    /// The rest of a name after its `/`, `#xx` decoded.
    fn name(&mut self) -> Result<Vec<u8>, Unsure> {
        let mut name = Vec::new();
        while let Some(&b) = self.text.get(self.at).filter(|&&b| is_regular(b)) {
            if b == b'#' {
                // As lopdf: `#` and two hex digits; its name ends at any other `#`, and what
                // follows is then no object it can read.
                let hex = self.text.get(self.at + 1..self.at + 3).ok_or(Unsure)?;
                let digit = |b: u8| (b as char).to_digit(16).ok_or(Unsure);
                name.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
                self.at += 3;
            } else {
                name.push(b);
                self.at += 1;
            }
        }
        Ok(name)
    }
}

fn is_space(b: u8) -> bool {
    b" \t\n\r\0\x0C".contains(&b)
}

fn is_regular(b: u8) -> bool {
    !is_space(b) && !b"()<>[]{}/%".contains(&b)
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

/// For a stream whose filters are unknown: `data` decoded by every filter, and what came out by
/// every filter again, `depth` deep; the budget left after the largest result, or `None` when any
/// passed it. Data a filter does not fit usually stops it within a few bytes.
fn decode_any(data: &[u8], depth: u32, left: u64) -> Option<u64> {
    let mut most = 0;
    for filter in [Filter::Flate, Filter::Lzw, Filter::Ascii85] {
        let mut out = if depth > 1 { Capped::keeping(left) } else { Capped::counting(left) };
        decode(filter, data, &mut out)?;
        most = most.max(out.written);
        if depth > 1 && out.written > 0 {
            most = most.max(left - decode_any(&out.kept, depth - 1, left)?);
        }
    }
    Some(left - most)
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

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::rfind(haystack, needle)
}
