//! Reading NCBI E-utilities answers: the esearch `eSearchResult` and the efetch PubMed XML
//! (`PubmedArticleSet`), both `retmode=xml`.
//!
//! The XML is read as a stream of events with quick-xml, keeping only the stack of open element
//! names. A piece of text belongs to a field by where it sits, e.g. `Journal/Title` is the journal
//! while `ArticleTitle` (with any inline `<i>`, `<sup>` markup inside) is the article's title. That
//! keeps the parser small and tolerant: elements it does not know are skipped, never an error, and
//! the same names nested elsewhere (a `PMID` inside `CommentsCorrections`, an `ArticleIdList`
//! inside a reference) are not confused with the article's own.

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

/// Why an answer could not be read. Internal only: never shown with the body it came from.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    #[error("answer is not well-formed XML: {0}")]
    Xml(String),
    #[error("esearch answer has no eSearchResult/Count")]
    NoCount,
    #[error("esearch reported an error")]
    SearchReported,
    #[error("efetch reported an error")]
    FetchReported,
    #[error("efetch answer has no PubMed record")]
    NoRecords,
    #[error("answer nests elements deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Deepest element nesting accepted. Real E-utilities answers stay near a dozen levels (an
/// `<i>` inside an `AbstractText` is about eight deep); the path checks below look at the open
/// elements on every event, so an unbounded stack would make a hostile answer quadratic.
pub const MAX_DEPTH: usize = 64;

/// What esearch found: the total count and the first page of PMIDs, best match first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHits {
    pub total: u64,
    pub pmids: Vec<String>,
}

/// Parse an esearch (`retmode=xml`) `eSearchResult`. No hits is an empty list, not an error; an
/// `ERROR` element (NCBI's backend failures) is. Only the top-level `Count` is the total: the
/// `TranslationStack` repeats `Count` per term.
pub fn search_hits(xml: &str) -> Result<SearchHits, ParseError> {
    let mut reader = Reader::from_str(xml.trim_start_matches('\u{feff}'));
    let mut stack: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut total = None;
    let mut pmids = Vec::new();
    loop {
        match reader.read_event().map_err(|e| ParseError::Xml(e.to_string()))? {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ParseError::TooDeep);
                }
                stack.push(start.local_name().as_ref().to_string());
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.xml10_content()),
            Event::End(_) => {
                // Only the three paths below matter, all three to four levels deep.
                let path: Vec<&str> =
                    if stack.len() <= 3 { stack.iter().map(String::as_str).collect() } else { Vec::new() };
                match path.as_slice() {
                    ["eSearchResult", "Count"] => {
                        total = Some(text.trim().parse::<u64>().map_err(|_| ParseError::NoCount)?);
                    }
                    ["eSearchResult", "IdList", "Id"] => {
                        let id = text.trim();
                        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
                            pmids.push(id.to_string());
                        }
                    }
                    ["eSearchResult", "ERROR"] => return Err(ParseError::SearchReported),
                    _ => {}
                }
                stack.pop();
                text.clear();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let total = total.ok_or(ParseError::NoCount)?;
    Ok(SearchHits { total, pmids })
}

/// One article as PubMed describes it; empty strings where a field is missing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Article {
    pub pmid: String,
    pub title: String,
    /// "Lastname Initials" (or a collective name), in the listed order.
    pub authors: Vec<String>,
    pub journal: String,
    pub year: Option<String>,
    /// The month as printed ("Jan" or "01") and day, when PubMed has them.
    pub month: Option<String>,
    pub day: Option<String>,
    pub doi: Option<String>,
    /// Paragraphs of the abstract; structured ones are prefixed with their label ("RESULTS: …").
    pub abstract_paragraphs: Vec<String>,
}

/// The elements whose text we keep, by where they sit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Pmid,
    Title,
    Journal,
    Year,
    Month,
    Day,
    MedlineDate,
    AbstractText,
    LastName,
    Initials,
    ForeName,
    CollectiveName,
    Doi,
    ElocationDoi,
}

/// An open element: its local name and the one attribute we may need (`Label`, `IdType`,
/// `EIdType`).
struct Open {
    name: String,
    attr: Option<String>,
}

#[derive(Default)]
struct AuthorParts {
    last: String,
    initials: String,
    fore: String,
    collective: String,
}

impl AuthorParts {
    fn display(&self) -> Option<String> {
        let last = collapse(&self.last);
        if !last.is_empty() {
            let given =
                if self.initials.trim().is_empty() { initials_of(&self.fore) } else { collapse(&self.initials) };
            return Some(if given.is_empty() { last } else { format!("{last} {given}") });
        }
        let collective = collapse(&self.collective);
        (!collective.is_empty()).then_some(collective)
    }
}

#[derive(Default)]
struct Builder {
    article: Article,
    author: Option<AuthorParts>,
    abstract_buf: String,
    abstract_label: Option<String>,
    elocation_doi: Option<String>,
    medline_date: String,
    text: String,
}

/// Parse an efetch `PubmedArticleSet`. Book articles and unknown elements are skipped. efetch is
/// only asked for PMIDs that esearch found, so an answer without any record, article or book, is
/// an error: NCBI's `<eFetchResult><ERROR>`, an empty set, or something else answering with 200.
pub fn articles(xml: &str) -> Result<Vec<Article>, ParseError> {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<Open> = Vec::new();
    let mut out = Vec::new();
    let mut current: Option<Builder> = None;
    let mut records = 0usize;
    let mut reported = false;
    loop {
        let event = reader.read_event().map_err(|e| ParseError::Xml(e.to_string()))?;
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ParseError::TooDeep);
                }
                let open = open(&start);
                match open.name.as_str() {
                    "PubmedArticle" => {
                        records += 1;
                        current = Some(Builder::default());
                    }
                    "PubmedBookArticle" => records += 1,
                    "ERROR" if stack.len() == 1 => reported = true,
                    _ => {}
                }
                stack.push(open);
                if let Some(builder) = current.as_mut() {
                    on_start(builder, &stack);
                }
            }
            Event::Empty(start) => {
                // `<AbstractText/>` and friends carry no text; nothing to record.
                let _ = start;
            }
            Event::End(_) => {
                if let Some(builder) = current.as_mut() {
                    on_end(builder, &stack);
                }
                if let Some(closed) = stack.pop()
                    && closed.name == "PubmedArticle"
                    && let Some(builder) = current.take()
                {
                    out.push(finish(builder));
                }
            }
            Event::Text(text) => push_text(&mut current, &stack, &text.xml10_content()),
            Event::CData(data) => push_text(&mut current, &stack, &data.xml10_content()),
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => Some(c),
                    Ok(None) => predefined_entity(&reference),
                    Err(_) => None,
                };
                if let Some(c) = resolved {
                    push_text(&mut current, &stack, c.encode_utf8(&mut [0u8; 4]));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    match records {
        0 if reported => Err(ParseError::FetchReported),
        0 => Err(ParseError::NoRecords),
        _ => Ok(out),
    }
}

fn open(start: &BytesStart<'_>) -> Open {
    let name = start.local_name().as_ref().to_string();
    let attr_name = match name.as_str() {
        "AbstractText" => Some("Label"),
        "ArticleId" => Some("IdType"),
        "ELocationID" => Some("EIdType"),
        _ => None,
    };
    let attr = attr_name.and_then(|key| {
        start
            .try_get_attribute(key)
            .ok()
            .flatten()
            .and_then(|a| a.normalized_value(XmlVersion::Implicit1_0).ok().map(|v| v.into_owned()))
    });
    Open { name, attr }
}

fn predefined_entity(name: &str) -> Option<char> {
    match name {
        "lt" => Some('<'),
        "gt" => Some('>'),
        "amp" => Some('&'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    }
}

/// Is the stack's tail exactly `names` (innermost last)?
fn ends_with(stack: &[Open], names: &[&str]) -> bool {
    stack.len() >= names.len() && stack[stack.len() - names.len()..].iter().zip(names).all(|(o, n)| o.name == *n)
}

fn contains(stack: &[Open], name: &str) -> bool {
    stack.iter().any(|o| o.name == name)
}

/// Which field the innermost text belongs to. Inline markup inside a title or an abstract
/// paragraph (`<i>`, `<sub>`…) still belongs to it, hence `contains` for those two.
fn field(stack: &[Open]) -> Option<Field> {
    if contains(stack, "ArticleTitle") && contains(stack, "Article") {
        return Some(Field::Title);
    }
    if ends_with_anywhere(stack, &["Article", "Abstract", "AbstractText"]) {
        return Some(Field::AbstractText);
    }
    let in_author = ends_with_parent(stack, &["Article", "AuthorList", "Author"]);
    let last = stack.last().map(|o| o.name.as_str());
    match last {
        Some("PMID") if ends_with(stack, &["MedlineCitation", "PMID"]) => Some(Field::Pmid),
        Some("Title") if ends_with(stack, &["Article", "Journal", "Title"]) => Some(Field::Journal),
        Some("Year") if ends_with(stack, &["Journal", "JournalIssue", "PubDate", "Year"]) => Some(Field::Year),
        Some("Month") if ends_with(stack, &["Journal", "JournalIssue", "PubDate", "Month"]) => Some(Field::Month),
        Some("Day") if ends_with(stack, &["Journal", "JournalIssue", "PubDate", "Day"]) => Some(Field::Day),
        Some("MedlineDate") if ends_with(stack, &["JournalIssue", "PubDate", "MedlineDate"]) => {
            Some(Field::MedlineDate)
        }
        Some("LastName") if in_author => Some(Field::LastName),
        Some("Initials") if in_author => Some(Field::Initials),
        Some("ForeName") if in_author => Some(Field::ForeName),
        Some("CollectiveName") if in_author => Some(Field::CollectiveName),
        Some("ArticleId") if ends_with(stack, &["PubmedData", "ArticleIdList", "ArticleId"]) => {
            is_doi(stack).then_some(Field::Doi)
        }
        Some("ELocationID") if ends_with(stack, &["Article", "ELocationID"]) => {
            is_doi(stack).then_some(Field::ElocationDoi)
        }
        _ => None,
    }
}

fn is_doi(stack: &[Open]) -> bool {
    stack.last().and_then(|o| o.attr.as_deref()).is_some_and(|t| t.eq_ignore_ascii_case("doi"))
}

/// `names` appear consecutively somewhere in the stack (the text may sit deeper, in markup).
fn ends_with_anywhere(stack: &[Open], names: &[&str]) -> bool {
    (names.len()..=stack.len()).any(|end| ends_with(&stack[..end], names))
}

/// The element one level up from the innermost is the tail of `names`.
fn ends_with_parent(stack: &[Open], names: &[&str]) -> bool {
    stack.len() > 1 && ends_with(&stack[..stack.len() - 1], names)
}

fn on_start(builder: &mut Builder, stack: &[Open]) {
    if ends_with(stack, &["Article", "AuthorList", "Author"]) {
        builder.author = Some(AuthorParts::default());
    } else if ends_with(stack, &["Article", "Abstract", "AbstractText"]) {
        builder.abstract_buf.clear();
        builder.abstract_label = stack.last().and_then(|o| o.attr.clone()).filter(|l| !l.trim().is_empty());
    }
    builder.text.clear();
}

fn on_end(builder: &mut Builder, stack: &[Open]) {
    if ends_with(stack, &["Article", "AuthorList", "Author"]) {
        if let Some(name) = builder.author.take().and_then(|a| a.display()) {
            builder.article.authors.push(name);
        }
        return;
    }
    if ends_with(stack, &["Article", "Abstract", "AbstractText"]) {
        let text = collapse(&builder.abstract_buf);
        if !text.is_empty() {
            let paragraph = match builder.abstract_label.take() {
                Some(label) => format!("{}: {text}", label.trim()),
                None => text,
            };
            builder.article.abstract_paragraphs.push(paragraph);
        }
        return;
    }
    let text = std::mem::take(&mut builder.text);
    let article = &mut builder.article;
    match field(stack) {
        Some(Field::Pmid) if article.pmid.is_empty() => article.pmid = collapse(&text),
        Some(Field::Journal) => article.journal = collapse(&text),
        Some(Field::Year) => article.year = Some(collapse(&text)),
        Some(Field::Month) => article.month = Some(collapse(&text)).filter(|m| !m.is_empty()),
        Some(Field::Day) => article.day = Some(collapse(&text)).filter(|d| !d.is_empty()),
        Some(Field::MedlineDate) => builder.medline_date = collapse(&text),
        Some(Field::Doi) if article.doi.is_none() => article.doi = Some(collapse(&text)).filter(|d| !d.is_empty()),
        Some(Field::ElocationDoi) => builder.elocation_doi = Some(collapse(&text)).filter(|d| !d.is_empty()),
        _ => {}
    }
}

fn push_text(current: &mut Option<Builder>, stack: &[Open], text: &str) {
    let Some(builder) = current.as_mut() else { return };
    match field(stack) {
        Some(Field::Title) => builder.article.title.push_str(text),
        Some(Field::AbstractText) => builder.abstract_buf.push_str(text),
        Some(part @ (Field::LastName | Field::Initials | Field::ForeName | Field::CollectiveName)) => {
            if let Some(author) = builder.author.as_mut() {
                let target = match part {
                    Field::LastName => &mut author.last,
                    Field::Initials => &mut author.initials,
                    Field::ForeName => &mut author.fore,
                    _ => &mut author.collective,
                };
                target.push_str(text);
            }
        }
        Some(_) => builder.text.push_str(text),
        None => {}
    }
}

fn finish(builder: Builder) -> Article {
    let mut article = builder.article;
    article.title = collapse(&article.title);
    if article.year.is_none() {
        // MedlineDate is free text such as "1998 Dec-1999 Jan": its first four digits are the year.
        let digits: String = builder.medline_date.chars().skip_while(|c| !c.is_ascii_digit()).take(4).collect();
        if digits.len() == 4 && digits.chars().all(|c| c.is_ascii_digit()) {
            article.year = Some(digits);
        }
    }
    if article.doi.is_none() {
        article.doi = builder.elocation_doi;
    }
    article
}

/// Whitespace runs (pretty-printing, line breaks) become one space.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "J Michael" → "JM", for records without an `Initials` element.
fn initials_of(fore: &str) -> String {
    fore.split(|c: char| c.is_whitespace() || c == '-').filter_map(|part| part.chars().next()).collect()
}

#[cfg(test)]
mod tests;
