//! The exactly-once, hash-chained audit log (CONTRACT §5).
