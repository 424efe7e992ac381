//! The link between audit lines. Without a key each line carries the SHA-256 of the line before:
//! that proves accidents (a lost or edited line), not intent, since anyone who can write the file
//! can recompute every hash after an edit. With `audit.chain_key` the link is an HMAC-SHA256
//! under that key, so only a holder of the key can produce a chain that verifies; checkpoint
//! lines (see [`super::writer`]) carry the head to copies kept off the host.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::Secret;

/// How lines are linked: plain SHA-256, or HMAC-SHA256 with the configured key.
#[derive(Clone, Default)]
pub struct Chain {
    key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.key.is_some() {
            "Chain(hmac-sha256)"
        } else {
            "Chain(sha256)"
        })
    }
}

impl Chain {
    /// The chain for `audit.chain_key` (unset = plain SHA-256).
    pub fn new(key: Option<&Secret>) -> Self {
        Chain {
            key: key.map(|k| k.expose().as_bytes().to_vec()),
        }
    }

    /// The link to `line` (its bytes without the newline), as the next line's `prev_sha256`.
    pub fn link(&self, line: &[u8]) -> String {
        let Some(key) = &self.key else {
            return hex::encode(Sha256::digest(line));
        };
        match Hmac::<Sha256>::new_from_slice(key) {
            Ok(mut mac) => {
                mac.update(line);
                hex::encode(mac.finalize().into_bytes())
            }
            // HMAC takes keys of any length; this arm exists only because the API is fallible.
            Err(_) => hex::encode(Sha256::digest(line)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keyed_link_depends_on_the_key() {
        let plain = Chain::default().link(b"line");
        let a = Chain::new(Some(&Secret::new("k1"))).link(b"line");
        let b = Chain::new(Some(&Secret::new("k2"))).link(b"line");
        assert_eq!(plain, hex::encode(Sha256::digest(b"line")));
        assert_ne!(a, plain);
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
