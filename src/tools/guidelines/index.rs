//! The full-text index over the corpus: tantivy in RAM, built once at start, BM25-ranked.
//!
//! Text fields go through one English analyzer (words, lower case, ASCII folding, stop words,
//! Snowball stemming), so "screening" finds "screen" and "vaccines" finds "vaccination"'s stem
//! only where Snowball agrees. A query is never parsed as query syntax: it is analysed into terms
//! like the documents, and each term is looked for in every field with that field's boost (a hit in
//! the title counts more than one in the body). Adjacent query words found next to each other add a
//! phrase bonus. The filters are exact on words: every word of `guideline_source` must be a word of
//! the record's `source`, every (stemmed) word of `condition` a word of its `condition`.

use tantivy::collector::{Count, TopDocs};
use tantivy::query::{
    AllQuery, BooleanQuery, BoostQuery, ConstScoreQuery, EmptyQuery, Occur, PhraseQuery, Query, TermQuery,
};
use tantivy::schema::{Field, INDEXED, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TokenStream,
};
use tantivy::{DocAddress, Index, IndexReader, ReloadPolicy, Searcher, TantivyDocument, Term, doc};

use super::corpus::Guideline;

const ENGLISH: &str = "voxgate_en";
const WORDS: &str = "voxgate_words";
/// Longest query terms used; a longer query keeps its first words.
const MAX_QUERY_TERMS: usize = 32;
/// Words so common in questions about guidelines that they only add noise.
#[rustfmt::skip]
const EXTRA_STOP_WORDS: &[&str] = &[
    "what", "which", "when", "who", "how", "do", "does", "did", "say", "says", "about", "should", "i", "we",
    "guideline", "guidelines", "recommendation", "recommendations", "recommend", "recommended", "current",
    "latest", "please", "tell", "me",
];
/// The per-field weights of a term hit: title and condition name the topic, the recommendations and
/// summary say what matters, the body says everything.
const BOOSTS: [(Searched, f32); 5] = [
    (Searched::Title, 3.0),
    (Searched::Condition, 2.5),
    (Searched::Recommendations, 1.2),
    (Searched::Summary, 1.5),
    (Searched::Text, 1.0),
];
/// Weight of two query words found side by side in the title or body.
const PHRASE_BOOST: f32 = 1.5;

#[derive(Debug, Clone, Copy)]
enum Searched {
    Title,
    Condition,
    Recommendations,
    Summary,
    Text,
}

/// Why the index could not be built or searched (a tantivy failure; never expected in RAM).
#[derive(Debug, thiserror::Error)]
#[error("guideline index: {0}")]
pub struct IndexError(#[from] tantivy::TantivyError);

/// The filters of one search.
#[derive(Debug, Default, Clone)]
pub(crate) struct Filters {
    pub source: Option<String>,
    pub condition: Option<String>,
}

/// The ranked answer: positions in the corpus, best first, and how many records matched.
#[derive(Debug)]
pub(crate) struct Hits {
    pub ranked: Vec<usize>,
    pub total: usize,
}

pub(crate) struct GuidelineIndex {
    reader: IndexReader,
    english: TextAnalyzer,
    words: TextAnalyzer,
    fields: Fields,
}

#[derive(Clone, Copy)]
struct Fields {
    position: Field,
    title: Field,
    condition: Field,
    recommendations: Field,
    summary: Field,
    text: Field,
    source: Field,
}

impl Fields {
    fn searched(&self, which: Searched) -> Field {
        match which {
            Searched::Title => self.title,
            Searched::Condition => self.condition,
            Searched::Recommendations => self.recommendations,
            Searched::Summary => self.summary,
            Searched::Text => self.text,
        }
    }
}

impl std::fmt::Debug for GuidelineIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuidelineIndex").field("documents", &self.reader.searcher().num_docs()).finish()
    }
}

fn english() -> TextAnalyzer {
    let stop = ENGLISH_STOP_WORDS.iter().chain(EXTRA_STOP_WORDS).map(|w| (*w).to_string());
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .filter(StopWordFilter::remove(stop))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Lucene's English stop words (tantivy's list), spelled out so the extra words can join them.
#[rustfmt::skip]
const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with",
];

fn words() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser).filter(AsciiFoldingFilter).build()
}

impl GuidelineIndex {
    /// Index every guideline; a record's position in `guidelines` is its key in [`Hits`].
    pub(crate) fn build(guidelines: &[Guideline]) -> Result<Self, IndexError> {
        let mut builder = Schema::builder();
        let position = builder.add_u64_field("position", STORED | INDEXED);
        let title = builder.add_text_field("title", analysed(ENGLISH));
        let condition = builder.add_text_field("condition", analysed(ENGLISH));
        let recommendations = builder.add_text_field("recommendations", analysed(ENGLISH));
        let summary = builder.add_text_field("summary", analysed(ENGLISH));
        let text = builder.add_text_field("text", analysed(ENGLISH));
        let source = builder.add_text_field("source", analysed(WORDS));
        let fields = Fields { position, title, condition, recommendations, summary, text, source };
        let index = Index::create_in_ram(builder.build());
        index.tokenizers().register(ENGLISH, english());
        index.tokenizers().register(WORDS, words());
        // One thread: the corpus is small, and start-up should not compete with the sessions.
        let mut writer = index.writer_with_num_threads(1, 15_000_000)?;
        for (at, g) in guidelines.iter().enumerate() {
            writer.add_document(doc!(
                position => at as u64,
                title => g.title.as_str(),
                condition => g.condition.as_str(),
                recommendations => g.recommendations.join("\n"),
                summary => g.summary.as_str(),
                text => g.text.as_str(),
                source => g.source.as_str(),
            ))?;
        }
        writer.commit()?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self { reader, english: english(), words: words(), fields })
    }

    /// The best `limit` guidelines for `query` within `filters`. A query without searchable words
    /// lists the filtered guidelines in corpus order (none without a filter).
    pub(crate) fn search(&self, query: &str, filters: &Filters, limit: usize) -> Result<Hits, IndexError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let terms = tokens(&mut self.english.clone(), query);
        let has_filter = filters.source.is_some() || filters.condition.is_some();
        if terms.is_empty() && !has_filter {
            return Ok(Hits { ranked: Vec::new(), total: 0 });
        }
        if terms.is_empty() {
            clauses.push((Occur::Must, Box::new(AllQuery)));
        } else {
            clauses.push((Occur::Must, Box::new(self.relevance(&terms))));
        }
        if let Some(source) = &filters.source {
            let words = tokens(&mut self.words.clone(), source);
            clauses.push((Occur::Must, all_of(self.fields.source, &words)));
        }
        if let Some(condition) = &filters.condition {
            let words = tokens(&mut self.english.clone(), condition);
            clauses.push((Occur::Must, all_of(self.fields.condition, &words)));
        }
        let searcher = self.reader.searcher();
        let query = BooleanQuery::new(clauses);
        let (top, total) = searcher.search(&query, &(TopDocs::with_limit(limit.max(1)).order_by_score(), Count))?;
        let ranked = top.into_iter().filter_map(|(_, address)| self.position(&searcher, address)).collect();
        Ok(Hits { ranked, total })
    }

    /// Each term in each field with the field's boost, plus phrase bonuses for neighbours.
    fn relevance(&self, terms: &[(usize, String)]) -> BooleanQuery {
        let mut should: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (_, word) in terms.iter().filter(|(_, word)| seen.insert(word.clone())) {
            for (which, boost) in BOOSTS {
                let term = Term::from_field_text(self.fields.searched(which), word);
                let query = TermQuery::new(term, IndexRecordOption::WithFreqs);
                should.push((Occur::Should, Box::new(BoostQuery::new(Box::new(query), boost))));
            }
        }
        for pair in terms.windows(2) {
            let [(at_a, a), (at_b, b)] = pair else { continue };
            for field in [self.fields.title, self.fields.text] {
                let phrase = PhraseQuery::new_with_offset(vec![
                    (0, Term::from_field_text(field, a)),
                    (at_b - at_a, Term::from_field_text(field, b)),
                ]);
                should.push((Occur::Should, Box::new(BoostQuery::new(Box::new(phrase), PHRASE_BOOST))));
            }
        }
        BooleanQuery::new(should)
    }

    fn position(&self, searcher: &Searcher, address: DocAddress) -> Option<usize> {
        let doc: TantivyDocument = searcher.doc(address).ok()?;
        doc.get_first(self.fields.position).and_then(|v| v.as_u64()).map(|p| p as usize)
    }
}

/// A filter: every word must be present; it does not change the ranking.
fn all_of(field: Field, words: &[(usize, String)]) -> Box<dyn Query> {
    let must: Vec<(Occur, Box<dyn Query>)> = words
        .iter()
        .map(|(_, word)| {
            let term = TermQuery::new(Term::from_field_text(field, word), IndexRecordOption::Basic);
            (Occur::Must, Box::new(term) as Box<dyn Query>)
        })
        .collect();
    if must.is_empty() {
        // A filter with no words (only punctuation or stop words) matches nothing rather than all.
        return Box::new(EmptyQuery);
    }
    Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(must)), 0.0))
}

/// The analysed words of `text` with their positions, at most [`MAX_QUERY_TERMS`].
fn tokens(analyzer: &mut TextAnalyzer, text: &str) -> Vec<(usize, String)> {
    let mut stream = analyzer.token_stream(text);
    let mut out = Vec::new();
    while out.len() < MAX_QUERY_TERMS && stream.advance() {
        let token = stream.token();
        out.push((token.position, token.text.clone()));
    }
    out
}

/// A text field analysed by `tokenizer`, with positions for the phrase bonus; not stored (the
/// records stay in the corpus vector).
fn analysed(tokenizer: &str) -> TextOptions {
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(tokenizer)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    TextOptions::default().set_indexing_options(indexing)
}
