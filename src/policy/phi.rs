//! What may leave the process about a user or a call: the keyed hash of `sub` that logs and audit
//! carry instead of the raw id, and the digest of a call's arguments.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Hashes user ids with a secret key, so audit and logs can correlate a user's actions without
/// holding the id, and nobody without the key can test a guess.
#[derive(Clone)]
pub struct UserHasher {
    key: Vec<u8>,
}

impl UserHasher {
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    /// A key that lives only as long as this process (used when `auth.user_hash_key` is unset).
    pub fn ephemeral() -> Self {
        let key: [u8; 32] = rand::random();
        Self::new(&key)
    }

    /// `u_` + 32 hex characters of HMAC-SHA256(key, sub).
    pub fn hash(&self, sub: &str) -> String {
        // HMAC accepts keys of any length, so this cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return "u_unavailable".into();
        };
        mac.update(sub.as_bytes());
        let digest = mac.finalize().into_bytes();
        format!("u_{}", hex::encode(&digest[..16]))
    }
}

impl std::fmt::Debug for UserHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UserHasher(***)")
    }
}

/// What logs, metrics and the audit log call a tool the model invented: its name may hold
/// anything the model heard, so only `unknown_` and a keyed hash of it (key per process: equal
/// names correlate within a run, nobody can test a guess).
pub fn invented_tool_name(name: &str) -> String {
    static KEY: std::sync::LazyLock<UserHasher> = std::sync::LazyLock::new(UserHasher::ephemeral);
    let hash = KEY.hash(name);
    format!("unknown_{}", hash.trim_start_matches("u_"))
}

/// Hex SHA-256 of a call's raw argument string, as the audit log records it.
pub fn args_sha256(raw_arguments: &str) -> String {
    hex::encode(Sha256::digest(raw_arguments.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_hash_is_keyed_and_stable() {
        let a = UserHasher::new(b"key-a");
        let b = UserHasher::new(b"key-b");
        assert_eq!(a.hash("dr.house"), a.hash("dr.house"));
        assert_ne!(a.hash("dr.house"), b.hash("dr.house"));
        assert!(!a.hash("dr.house").contains("house"));
        assert_eq!(a.hash("x").len(), 34);
    }
}
