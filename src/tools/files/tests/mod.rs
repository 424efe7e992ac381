//! Unit tests of the file tools' parts that need no server: extraction of every format and of
//! damaged documents, and the local backend's root confinement. The same scenarios against a real
//! WebDAV server live in `tests/files/`.

mod extract;
mod local;
mod pdf_guard;
mod tools;
