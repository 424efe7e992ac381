//! Text extraction: plain text, Markdown and CSV as they are, HTML without its markup, PDF through
//! `pdf-extract` once [`super::pdf_guard`] has bounded what its streams decode to, DOCX by reading
//! `word/document.xml` from the zip with quick-xml.
//!
//! Extraction is CPU work on untrusted bytes, so it runs on the blocking pool, and the extractor
//! crates' panics on malformed input (pdf-extract has several) are caught: a damaged document is a
//! [`FilesError::Corrupt`], never a crashed worker. PDFs are read in a worker process with its own
//! memory and CPU limits ([`super::sandbox`]).

use std::io::Read;
use std::panic::{AssertUnwindSafe, catch_unwind};

use quick_xml::events::Event;

use super::FilesError;
use super::backend::DocKind;

/// The most XML read out of a DOCX body (a zip bomb inflates far beyond its file size). The XML
/// is parsed as it is inflated, never held whole, so this bounds the parser's work and its one
/// buffer (the largest single XML event); ordinary Word markup takes 5–20 bytes of XML per byte of
/// text, so a real document reaches [`MAX_DOCX_TEXT_BYTES`] first.
const MAX_DOCX_XML_BYTES: u64 = 16 * 1024 * 1024;
/// The most text collected from a DOCX body; reading stops there. The tools use little of it:
/// `retrieve_nextcloud_file` returns at most 20,000 characters, and a content search only looks
/// for the query words. 1 MiB is some 150,000 words, a few hundred pages — more than any
/// document a search should see whole — while four content reads at once stay at a few MiB
/// (a 4 MiB DOCX could otherwise inflate to gigabytes of text, copied again by every later step).
pub(crate) const MAX_DOCX_TEXT_BYTES: usize = 1024 * 1024;
/// The most a PDF's streams may decode to, all together (see [`super::pdf_guard`]).
const MAX_PDF_DECODED_BYTES: u64 = 64 * 1024 * 1024;

/// The text of a document of `kind`. `Ok(None)` for kinds that have no text ([`DocKind::Other`]).
pub async fn extract_text(kind: DocKind, bytes: Vec<u8>) -> Result<Option<String>, FilesError> {
    if kind == DocKind::Other {
        return Ok(None);
    }
    if kind == DocKind::Pdf {
        return super::sandbox::extract_pdf(bytes).await.map(|text| Some(tidy(&text)));
    }
    let work = move || catch_unwind(AssertUnwindSafe(|| extract_now(kind, &bytes)));
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(result)) => result.map(|text| Some(tidy(&text))),
        Ok(Err(_panic)) => {
            tracing::debug!(?kind, "text extractor panicked on a document");
            Err(FilesError::Corrupt)
        }
        Err(_) => Err(FilesError::Worker),
    }
}

/// Raw text formats, decoded without any extraction (a byte-order mark dropped, invalid UTF-8
/// replaced).
pub fn decode_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

fn extract_now(kind: DocKind, bytes: &[u8]) -> Result<String, FilesError> {
    match kind {
        DocKind::PlainText | DocKind::Markdown | DocKind::Csv => Ok(decode_text(bytes)),
        DocKind::Html => Ok(html_text(&decode_text(bytes))),
        DocKind::Pdf => pdf_text(bytes),
        DocKind::Docx => docx_text(bytes),
        DocKind::Other => Ok(String::new()),
    }
}

/// The text of a PDF, once its streams are known to decode within the budget. Run in the
/// extraction worker ([`super::sandbox`]), or here when there is none.
pub(super) fn pdf_text(bytes: &[u8]) -> Result<String, FilesError> {
    super::pdf_guard::check(bytes, MAX_PDF_DECODED_BYTES).map_err(|_| FilesError::TooLarge { limit: MAX_PDF_DECODED_BYTES })?;
    pdf_extract::extract_text_from_mem(bytes).map_err(|_| FilesError::Corrupt)
}

/// The text of an HTML page: text nodes outside `<script>`/`<style>`, a line break after blocks.
fn html_text(html: &str) -> String {
    use html5gum::{Token, Tokenizer};
    let mut out = String::new();
    let mut hidden: Option<Vec<u8>> = None;
    // Inside a hidden `<head>`, the element there whose text is the head's own (`<title>`…).
    let mut head_text: Option<Vec<u8>> = None;
    // A string input cannot fail: the tokenizer's error type is `Infallible`.
    for token in Tokenizer::new(html).flatten() {
        match token {
            Token::StartTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                // `</head>` may be omitted (HTML5): a tag that cannot be in the head ends it, as a
                // browser's parser does. The tokenizer only splits tokens and never implies it.
                if hidden.as_deref() == Some(b"head") && !is_head_content(&name) {
                    hidden = None;
                    head_text = None;
                } else if hidden.as_deref() == Some(b"head")
                    && !tag.self_closing
                    && matches!(
                        name.as_slice(),
                        b"title" | b"noscript" | b"noframes" | b"style" | b"script" | b"template"
                    )
                {
                    head_text = Some(name.clone());
                }
                if matches!(
                    name.as_slice(),
                    b"script" | b"style" | b"template" | b"head"
                ) && !tag.self_closing
                {
                    hidden.get_or_insert(name);
                } else if matches!(name.as_slice(), b"br" | b"li" | b"tr") {
                    out.push('\n');
                }
            }
            Token::EndTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                if head_text.as_deref() == Some(name.as_slice()) {
                    head_text = None;
                }
                if hidden.as_deref() == Some(name.as_slice()) {
                    hidden = None;
                } else if is_block(&name) {
                    out.push('\n');
                } else if matches!(name.as_slice(), b"td" | b"th") {
                    out.push('\t');
                }
            }
            // Text outside the head's own elements also ends an unclosed head.
            Token::String(text)
                if hidden.as_deref() == Some(b"head")
                    && head_text.is_none()
                    && !text.iter().all(u8::is_ascii_whitespace) =>
            {
                hidden = None;
                out.push_str(&String::from_utf8_lossy(&text))
            }
            Token::String(text) if hidden.is_none() => {
                out.push_str(&String::from_utf8_lossy(&text))
            }
            _ => {}
        }
    }
    out
}

/// Elements that may stand in `<head>`; any other start tag implies `</head>`.
fn is_head_content(name: &[u8]) -> bool {
    matches!(
        name,
        b"base"
            | b"basefont"
            | b"bgsound"
            | b"link"
            | b"meta"
            | b"title"
            | b"noscript"
            | b"noframes"
            | b"style"
            | b"script"
            | b"template"
            | b"head"
    )
}

fn is_block(name: &[u8]) -> bool {
    matches!(
        name,
        b"p" | b"div"
            | b"h1"
            | b"h2"
            | b"h3"
            | b"h4"
            | b"h5"
            | b"h6"
            | b"ul"
            | b"ol"
            | b"table"
            | b"section"
            | b"article"
            | b"header"
            | b"footer"
            | b"blockquote"
            | b"pre"
            | b"title"
    )
}

/// The text of a DOCX body: `w:t` runs, tabs and breaks, one line per paragraph; at most
/// [`MAX_DOCX_TEXT_BYTES`] of it, from at most [`MAX_DOCX_XML_BYTES`] of XML.
fn docx_text(bytes: &[u8]) -> Result<String, FilesError> {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|_| FilesError::Corrupt)?;
    let part = archive
        .by_name("word/document.xml")
        .map_err(|_| FilesError::Corrupt)?;
    // Parsed as it is inflated: nothing past the text cap is ever decompressed.
    let mut reader =
        quick_xml::Reader::from_reader(std::io::BufReader::new(part.take(MAX_DOCX_XML_BYTES)));
    let mut out = String::new();
    let mut in_text = false;
    let mut buf = Vec::new();
    loop {
        let event = match reader.read_event_into(&mut buf) {
            Ok(event) => event,
            // The XML cap cut the body inside an element: what was read is the text.
            Err(_) if reader.get_ref().get_ref().limit() == 0 => break,
            Err(_) => return Err(FilesError::Corrupt),
        };
        let full = match event {
            Event::Start(e) if e.name().as_ref() == "w:t" => {
                in_text = true;
                false
            }
            Event::End(e) if e.name().as_ref() == "w:t" => {
                in_text = false;
                false
            }
            Event::End(e) if e.name().as_ref() == "w:p" => push_capped(&mut out, "\n"),
            Event::Empty(e) if e.name().as_ref() == "w:tab" => push_capped(&mut out, "\t"),
            Event::Empty(e) if matches!(e.name().as_ref(), "w:br" | "w:cr") => {
                push_capped(&mut out, "\n")
            }
            Event::Text(t) if in_text => push_capped(&mut out, &t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                let mut entity = String::new();
                push_entity(&mut entity, &r)?;
                push_capped(&mut out, &entity)
            }
            Event::Eof => break,
            _ => false,
        };
        if full {
            tracing::debug!("DOCX text cut at its cap");
            break;
        }
        buf.clear();
    }
    Ok(out)
}

/// Append `text` to `out`, cut (at a character boundary) where `out` would pass
/// [`MAX_DOCX_TEXT_BYTES`]; whether `out` is now full.
fn push_capped(out: &mut String, text: &str) -> bool {
    let room = MAX_DOCX_TEXT_BYTES.saturating_sub(out.len());
    if text.len() < room {
        out.push_str(text);
        return false;
    }
    out.push_str(&text[..text.floor_char_boundary(room)]);
    true
}

/// The text an entity reference stands for (`&#233;`, `&amp;`); an unknown one is corrupt XML.
pub(super) fn push_entity(
    out: &mut String,
    reference: &quick_xml::events::BytesRef<'_>,
) -> Result<(), FilesError> {
    match reference.resolve_char_ref() {
        Ok(Some(c)) => out.push(c),
        Ok(None) => out.push_str(
            quick_xml::escape::resolve_predefined_entity(reference).ok_or(FilesError::Corrupt)?,
        ),
        Err(_) => return Err(FilesError::Corrupt),
    }
    Ok(())
}

/// Line endings normalised, trailing spaces dropped, runs of blank lines cut to one. One pass into
/// one new string: the text may be megabytes long (a 4 MiB text file in a content search).
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    // "\r\n", a lone "\r" and "\n" each end a line.
    let lines = text
        .split('\n')
        .flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'));
    for line in lines {
        let line = line.trim_end();
        if line.trim().is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    // Trimmed in place, not copied.
    out.truncate(out.trim_end().len());
    let leading = out.len() - out.trim_start().len();
    out.drain(..leading);
    out
}

/// `text` cut to at most `max_chars` characters, and whether it was cut.
pub fn truncate_chars(text: String, max_chars: usize) -> (String, bool) {
    match text.char_indices().nth(max_chars) {
        None => (text, false),
        Some((at, _)) => (text[..at].to_string(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::html_text;

    #[test]
    fn an_omitted_head_end_tag_does_not_hide_the_body() {
        // `</head>` is optional in HTML5: the body's first tag, or its first text, ends the head.
        let text = html_text("<html><head><title>T</title><body><p>Metformin 500 mg</p></body></html>");
        assert!(text.contains("Metformin 500 mg"), "{text:?}");
        assert!(!text.contains('T'), "the title stays hidden: {text:?}");
        let text = html_text("<head><meta charset=utf-8><title>T</title>\n<div>Insulin</div>");
        assert!(text.contains("Insulin"), "{text:?}");
        let text = html_text("<head><meta charset=utf-8><title>T</title><script>x()</script>Glucose");
        assert_eq!(text.trim(), "Glucose");
        let text = html_text("<head><title>T</title></head><body>Body</body>");
        assert_eq!(text.trim(), "Body");
        let text = html_text("<head><meta name=a>Lactate");
        assert_eq!(text.trim(), "Lactate");
    }
}
