//! `[backends.guidelines]`: where `search_medical_guidelines` reads its corpus.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GuidelinesBackendConfig {
    /// An operator's own corpus (JSON Lines, the shipped corpus's format); unset = the corpus
    /// shipped in the binary. Checked at start: a bad record refuses start, naming file, line and field.
    pub corpus_path: Option<PathBuf>,
}
