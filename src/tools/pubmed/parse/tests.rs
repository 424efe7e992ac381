//! The parser against real E-utilities answers (Biopython's recorded fixtures) and against the
//! malformed and unusual shapes a live NCBI may send.

use super::*;

const PUBMED1: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_pubmed1.xml");
const PUBMED2: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_pubmed2.xml");
const PUBMED4: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_pubmed4.xml");
const ESEARCH: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_esearch1.xml");
const ESEARCH_HISTORY: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_esearch2.xml");
const ESEARCH_TRANSLATED: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_esearch3.xml");
const ESEARCH_NONE: &str = include_str!("../../../../tests/fixtures/pubmed/biopython_esearch8.xml");

#[test]
fn esearch_gives_count_and_ids_in_order() {
    let hits = search_hits(ESEARCH).unwrap();
    assert_eq!(hits.total, 63);
    assert_eq!(hits.pmids.len(), 20);
    assert_eq!(hits.pmids[0], "41282813");
    assert_eq!(hits.pmids[19], "37810457");
    let hits = search_hits(ESEARCH_HISTORY).unwrap();
    assert_eq!((hits.total, hits.pmids.len()), (42249, 100));
    let hits = search_hits(ESEARCH_TRANSLATED).unwrap();
    assert_eq!(hits.total, 2651);
    assert_eq!(hits.pmids, vec!["11121077", "11121076", "11121075", "11121074", "11121073", "11121072"]);
}

#[test]
fn esearch_without_hits_is_empty_not_an_error() {
    let hits = search_hits(ESEARCH_NONE).unwrap();
    assert_eq!(hits, SearchHits { total: 0, pmids: vec![] });
}

#[test]
fn esearch_error_bodies_are_errors() {
    let reported = "<eSearchResult><ERROR>Search Backend failed: Exception:\n'retstart' cannot be larger \
        than 9998.</ERROR></eSearchResult>";
    assert_eq!(search_hits(reported), Err(ParseError::SearchReported));
    assert_eq!(search_hits("<html><body>busy</body></html>"), Err(ParseError::NoCount));
    assert!(search_hits("<eSearchResult><Count>x</Count></eSearchResult>").is_err());
    assert!(search_hits("<eSearchResult><Count>1</Wrong>").is_err());
}

#[test]
fn pubmed1_two_articles_with_season_date_and_doi_from_pubmeddata() {
    let articles = articles(PUBMED1).unwrap();
    assert_eq!(articles.len(), 2);
    let first = &articles[0];
    assert_eq!(first.pmid, "12091962");
    assert_eq!(first.title, "The treatment of AIDS behind the walls of correctional facilities.");
    assert_eq!(first.authors, vec!["Olivero JM"]);
    assert_eq!(first.journal, "Social justice (San Francisco, Calif.)");
    assert_eq!(first.year.as_deref(), Some("1990"));
    assert_eq!(first.doi, None);
    assert!(first.abstract_paragraphs.is_empty());
    let second = &articles[1];
    assert_eq!(second.pmid, "9997");
    assert_eq!(second.doi.as_deref(), Some("10.1016/0005-2795(76)90109-4"));
    assert_eq!(second.year.as_deref(), Some("1976"));
    assert!(second.abstract_paragraphs[0].starts_with("Electron paramagnetic resonance"));
}

#[test]
fn pubmed2_entities_and_many_authors() {
    let articles = articles(PUBMED2).unwrap();
    assert_eq!(articles.len(), 2);
    let first = &articles[0];
    assert_eq!(first.pmid, "11748933");
    assert_eq!(first.doi.as_deref(), Some("10.1006/cryo.2001.2328"));
    assert_eq!(first.authors.len(), 8);
    assert_eq!(first.authors[0], "Taddei AR");
    assert_eq!(first.journal, "Cryobiology");
    // `&lt;` inside the abstract is resolved, not dropped.
    assert!(first.abstract_paragraphs[0].contains("(P < 0.001)"), "{:?}", first.abstract_paragraphs);
    let second = &articles[1];
    assert_eq!(second.pmid, "11700088");
    assert_eq!(second.title, "Proton MRI of (13)C distribution by J and chemical shift editing.");
    assert_eq!(second.authors.last().map(String::as_str), Some("De Luca F"));
}

#[test]
fn pubmed4_structured_abstract_inline_markup_and_references_ignored() {
    let articles = articles(PUBMED4).unwrap();
    assert_eq!(articles.len(), 1);
    let article = &articles[0];
    assert_eq!(article.pmid, "27797938");
    assert_eq!(
        article.title,
        "Leucocyte telomere length, genetic variants at the TERT gene region and risk of pancreatic cancer."
    );
    assert_eq!(article.journal, "Gut");
    assert_eq!(article.year.as_deref(), Some("2017"));
    assert_eq!(article.doi.as_deref(), Some("10.1136/gutjnl-2016-312510"));
    assert_eq!(article.authors[0], "Bao Y");
    assert!(article.authors.len() > 20);
    let labels: Vec<&str> = article.abstract_paragraphs.iter().filter_map(|p| p.split(':').next()).collect();
    assert_eq!(labels, vec!["OBJECTIVE", "DESIGN", "RESULTS", "CONCLUSIONS"]);
    assert!(
        article.abstract_paragraphs[2].contains("p trend =0.048")
            || article.abstract_paragraphs[2].contains("ptrend=0.048")
    );
}

#[test]
fn medline_date_and_elocation_doi_fallbacks() {
    let xml = r#"<PubmedArticleSet><PubmedArticle><MedlineCitation><PMID>1</PMID><Article>
        <Journal><JournalIssue><PubDate><MedlineDate>1998 Dec-1999 Jan</MedlineDate></PubDate></JournalIssue>
        <Title>J</Title></Journal><ArticleTitle>T</ArticleTitle>
        <ELocationID EIdType="doi">10.1/x</ELocationID>
        <AuthorList><Author><CollectiveName>ACME Study Group</CollectiveName></Author>
        <Author><LastName>Doe</LastName><ForeName>Jane Ann</ForeName></Author></AuthorList>
        </Article></MedlineCitation></PubmedArticle></PubmedArticleSet>"#;
    let articles = articles(xml).unwrap();
    assert_eq!(articles[0].year.as_deref(), Some("1998"));
    assert_eq!(articles[0].doi.as_deref(), Some("10.1/x"));
    assert_eq!(articles[0].authors, vec!["ACME Study Group", "Doe JA"]);
}

#[test]
fn malformed_xml_is_an_error() {
    assert!(articles("<PubmedArticleSet><PubmedArticle></Wrong>").is_err());
}

#[test]
fn efetch_answers_without_records_are_errors_but_book_records_are_not() {
    // efetch is only asked for PMIDs esearch found: an answer with no record at all is NCBI
    // failing, whether it says so in an `ERROR` element or not.
    let reported = "<eFetchResult><ERROR>Empty result - nothing todo</ERROR></eFetchResult>";
    assert_eq!(articles(reported), Err(ParseError::FetchReported));
    assert_eq!(articles("<PubmedArticleSet></PubmedArticleSet>"), Err(ParseError::NoRecords));
    assert_eq!(articles("<html><body>busy</body></html>"), Err(ParseError::NoRecords));
    // A book record (a StatPearls chapter) is a record, only not one the tool lists.
    let book = "<PubmedArticleSet><PubmedBookArticle><BookDocument><PMID>1</PMID></BookDocument>\
        </PubmedBookArticle></PubmedArticleSet>";
    assert_eq!(articles(book).unwrap(), vec![]);
}

/// `depth` nested `<a>` elements with text at every level, inside `prefix`…`suffix`.
fn nested(prefix: &str, depth: usize, suffix: &str) -> String {
    let mut xml = String::with_capacity(prefix.len() + suffix.len() + depth * 8);
    xml.push_str(prefix);
    for _ in 0..depth {
        xml.push_str("<a>x");
    }
    for _ in 0..depth {
        xml.push_str("</a>");
    }
    xml.push_str(suffix);
    xml
}

const ARTICLE_OPEN: &str = "<PubmedArticleSet><PubmedArticle><MedlineCitation><PMID>1</PMID><Article><ArticleTitle>";
const ARTICLE_CLOSE: &str = "</ArticleTitle></Article></MedlineCitation></PubmedArticle></PubmedArticleSet>";

#[test]
fn pathologically_deep_answers_are_refused_fast() {
    // About 3.9 MB: 550,000 nested elements. Checking the whole open-element path on every event
    // took minutes; with the depth bound both parsers give up at the 65th level.
    let started = std::time::Instant::now();
    let efetch = nested(ARTICLE_OPEN, 550_000, ARTICLE_CLOSE);
    assert_eq!(articles(&efetch), Err(ParseError::TooDeep));
    let esearch = nested("<eSearchResult><Count>1</Count>", 550_000, "</eSearchResult>");
    assert_eq!(search_hits(&esearch), Err(ParseError::TooDeep));
    assert!(started.elapsed() < std::time::Duration::from_millis(500), "took {:?}", started.elapsed());
}

#[test]
fn nesting_up_to_the_bound_still_parses() {
    // ArticleTitle sits five levels deep; markup inside it may go to the bound.
    let title = nested(ARTICLE_OPEN, MAX_DEPTH - 5, ARTICLE_CLOSE);
    let found = articles(&title).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].title, "x".repeat(MAX_DEPTH - 5));
    let too_deep = nested(ARTICLE_OPEN, MAX_DEPTH - 4, ARTICLE_CLOSE);
    assert_eq!(articles(&too_deep), Err(ParseError::TooDeep));
}
