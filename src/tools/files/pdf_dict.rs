//! The `/Filter` of a PDF stream, read from the text before its `stream` keyword as lopdf reads it.
//!
//! [`super::pdf_guard`] decodes each stream the way lopdf would, so it must know the filters lopdf
//! will apply. They are read from the dictionary between the object's `obj` and the keyword,
//! tokenised as lopdf tokenises it (`#xx` escapes in names, strings, nested dictionaries, the last
//! key of the outer dictionary), with the `/EarlyChange` of a `/DecodeParms` dictionary, which
//! changes how LZW is read. Whatever could be read two ways — a comment, an `obj` that is not the
//! object's own, a `\` in a name, a `/Filter` that is not names, a repeated key — is [`Unsure`].

/// A filter lopdf applies; others (images' DCT, JPX, CCITT) it leaves encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filter {
    Flate,
    /// `early_change`: codes widen one entry early, as lopdf reads LZW unless `/EarlyChange 0`.
    Lzw { early_change: bool },
    Ascii85,
}

/// How far before `stream` its dictionary is looked for; a longer one is not read with certainty.
const MAX_DICTIONARY: usize = 64 * 1024;

/// The dictionary before a `stream` keyword cannot be read with certainty.
#[derive(Debug)]
pub(super) struct Unsure;

/// The `/Filter` of the stream whose `stream` keyword ends `head`, in decoding order, read from
/// the dictionary after the object's `obj`. lopdf decodes only when that is one name or an array
/// of names; names it does not decode are dropped (lopdf fails on them, and decodes nothing).
pub(super) fn filters(head: &[u8]) -> Result<Vec<Filter>, Unsure> {
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
    let keys = dictionary(&mut lexer, 1)?;
    if lexer.next()?.is_some() {
        return Err(Unsure);
    }
    // lopdf reads `/EarlyChange` only from a `/DecodeParms` that is itself a dictionary (not an
    // array, not a reference) and only as an integer; anything else is its default, 1.
    let early_change = match keys.decode_parms {
        Some(Value::Dict(parms)) => match parms.early_change {
            Some(Value::Integer(n)) => n != 0,
            _ => true,
        },
        _ => true,
    };
    let names = match keys.filter {
        None => return Ok(Vec::new()),
        Some(Value::Name(name)) => vec![name],
        Some(Value::Names(Some(names))) => names,
        Some(_) => return Err(Unsure),
    };
    Ok(names
        .iter()
        .filter_map(|name| match name.as_slice() {
            b"FlateDecode" | b"Fl" => Some(Filter::Flate),
            b"LZWDecode" | b"LZW" => Some(Filter::Lzw { early_change }),
            b"ASCII85Decode" | b"A85" => Some(Filter::Ascii85),
            _ => None,
        })
        .collect())
}

/// A dictionary value, as far as a `/Filter` and an `/EarlyChange` go.
enum Value {
    Name(Vec<u8>),
    /// An array: its names when it holds nothing else.
    Names(Option<Vec<Vec<u8>>>),
    Integer(i64),
    Dict(Box<Keys>),
    Other,
}

/// The keys of a dictionary that decide how its stream is decoded.
#[derive(Default)]
struct Keys {
    filter: Option<Value>,
    decode_parms: Option<Value>,
    early_change: Option<Value>,
}

/// The rest of a dictionary after its `<<`, through its `>>`.
fn dictionary(lexer: &mut Lexer, depth: usize) -> Result<Keys, Unsure> {
    let mut keys = Keys::default();
    loop {
        match lexer.next()?.ok_or(Unsure)? {
            Token::DictClose => return Ok(keys),
            Token::Name(key) => {
                let token = lexer.next()?.ok_or(Unsure)?;
                let value = value(lexer, token, depth)?;
                let slot = match key.as_slice() {
                    b"Filter" => &mut keys.filter,
                    b"DecodeParms" => &mut keys.decode_parms,
                    b"EarlyChange" => &mut keys.early_change,
                    _ => continue,
                };
                // lopdf keeps the last of repeated keys; two are a sign of mischief.
                if slot.replace(value).is_some() {
                    return Err(Unsure);
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
                    if is_number(word) && is_number(generation) =>
                {
                    return Ok(Value::Other);
                }
                _ => lexer.at = back,
            }
            integer(word)?.map_or(Value::Other, Value::Integer)
        }
        Token::DictOpen => Value::Dict(Box::new(dictionary(lexer, depth + 1)?)),
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

/// `word` as lopdf reads an integer (a sign, then digits); `None` for any other word, and `Unsure`
/// for digits too many for an `i64`, which lopdf does not read at all.
fn integer(word: &[u8]) -> Result<Option<i64>, Unsure> {
    let digits = word.strip_prefix(b"+").or_else(|| word.strip_prefix(b"-")).unwrap_or(word);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Ok(None);
    }
    let text = std::str::from_utf8(word).map_err(|_| Unsure)?;
    text.parse().map(Some).map_err(|_| Unsure)
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
            if b == b'\\' {
                // A name to lopdf, but an escape inside its string: were this reading inside a
                // string lopdf sees (`(obj << /a\( )`), `\(` would not start a new one.
                return Err(Unsure);
            } else if b == b'#' {
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


fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::rfind(haystack, needle)
}
