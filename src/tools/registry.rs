//! The enabled tools with compiled schemas and effective policy.
