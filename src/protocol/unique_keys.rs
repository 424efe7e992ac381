//! Is every key of every object in a JSON text written once? voxgate reads a guarded client event
//! (`session.update`, `response.create`) with serde_json, which keeps the last of duplicate keys,
//! like Python and JavaScript. Other decoders merge a repeated object into the first one (Go's
//! `encoding/json` into a struct or map, Json.NET by default), so an upstream could act on a
//! `session.tools` or `response.input` that voxgate never saw. An event whose keys repeat is
//! refused rather than guessed at.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deserializes any JSON value, failing on an object with a key written twice, at any depth.
struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom("a key written twice"));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
}

/// Whether `bytes` is JSON in which no object has a key written twice (escaped spellings count
/// as the key they decode to: `"t\u0079pe"` is `type`).
pub fn has_unique_keys(bytes: &[u8]) -> bool {
    serde_json::from_slice::<UniqueKeys>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_written_twice_at_any_depth_is_found() {
        assert!(has_unique_keys(br#"{"type":"session.update","session":{"tools":[{"name":"a"}],"voice":"x"}}"#));
        assert!(has_unique_keys(br#"[{"a":1},{"a":2}]"#), "the same key in two objects is fine");
        assert!(!has_unique_keys(br#"{"type":"session.update","session":{"tools":[]},"session":{}}"#));
        assert!(!has_unique_keys(br#"{"response":{"input":[{"type":"a","type":"b"}]}}"#));
        assert!(!has_unique_keys(br#"{"session":{"tools":[],"t\u006fols":[]}}"#), "escaped spellings decode first");
        assert!(!has_unique_keys(b"not json"));
    }
}
