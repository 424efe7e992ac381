//! A recomputed chain under `audit.chain_key`.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::support::{FakeUpstream, model_calls, spawn_voxgate};

/// With `audit.chain_key`, someone who edits a line and recomputes every later link (as one can
/// for a plain SHA-256 chain) still fails `verify`.
#[tokio::test]
async fn a_recomputed_chain_fails_verify_with_the_chain_key() {
    let work = tempfile::tempdir().unwrap();
    let mut fake = FakeUpstream::start().await;
    let audit = work.path().join("audit.jsonl");
    let config = config(
        &fake,
        &audit,
        &work.path().join("cal.ics"),
        "chain_key = \"k-3f9a1c-7d2e5b40\"\ncheckpoint_records = 3",
    );
    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (_client, mut up) = session(&addr, &mut fake).await;
    for call in ["h1", "h2"] {
        model_calls(&mut up, &[(call, "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    stop(&mut child).await;
    let key = [("VOXGATE_AUDIT__CHAIN_KEY", "k-3f9a1c-7d2e5b40")];
    let (ok, report) = verify(&audit, &key);
    assert!(ok, "{report}");
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        text.contains("\"checkpoint\""),
        "a checkpoint every 3 records: {text}"
    );
    let (ok, _) = verify(&audit, &[]);
    assert!(!ok, "a keyed chain does not verify as plain SHA-256");

    // The attacker's edit: a completed call becomes failed, and every link is recomputed with
    // plain SHA-256, checkpoints included.
    use sha2::{Digest, Sha256};
    let mut prev = "0".repeat(64);
    let mut forged = String::new();
    for line in text.replacen("\"completed\"", "\"failed\"", 1).lines() {
        let mut value: Value = serde_json::from_str(line).unwrap();
        value["prev_sha256"] = json!(prev);
        if value["event"] == "checkpoint" {
            value["chain_head"] = json!(prev);
        }
        let bytes = serde_json::to_string(&value).unwrap();
        prev = hex::encode(Sha256::digest(bytes.as_bytes()));
        forged.push_str(&bytes);
        forged.push('\n');
    }
    std::fs::write(&audit, forged).unwrap();
    let (ok, _) = verify(&audit, &[]);
    assert!(
        ok,
        "without the key, a recomputed chain looks sound (the limit docs/audit.md states)"
    );
    let (ok, report) = verify(&audit, &key);
    assert!(!ok, "with the key it does not: {report}");
}
