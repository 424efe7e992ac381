//! PHI read from a file stays in the session: it taints later third-party queries.

use super::*;

/// A name read from a file taints the session: a PubMed query that reuses it never leaves.
#[tokio::test]
async fn a_name_read_from_a_file_blocks_a_later_pubmed_query() {
    let mut fake = FakeUpstream::start().await;
    // PubMed points at a closed port: a query that got past screening would fail differently.
    let pubmed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "{}[backends.pubmed]\nbase_url = \"http://127.0.0.1:{pubmed_port}/eutils\"\n",
        local_toml()
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let file_id = id_of(
        &proxy,
        "discharge",
        "/Clinic/Letters/2026/discharge-summary.txt",
    )
    .await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;

    let args = json!({"file_id": file_id}).to_string();
    support::model_calls(&mut up, &[("call_f1", "retrieve_nextcloud_file", &args)]).await;
    client.until("voxgate.tool_call.completed").await;
    let output = up.until("conversation.item.create").await;
    assert!(
        output["item"]["output"]
            .as_str()
            .unwrap()
            .contains("Zebulon Quixote"),
        "the model may read it"
    );

    let query = json!({"query": "Quixote insulin dosing"}).to_string();
    support::model_calls(&mut up, &[("call_p1", "search_pubmed", &query)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "phi_blocked", "{failed}");
    assert!(!failed.to_string().contains("Quixote"));
    let output = up.until("conversation.item.create").await;
    assert!(
        output["item"]["output"]
            .as_str()
            .unwrap()
            .contains("phi_blocked")
    );
    let audit = std::fs::read_to_string(proxy.audit_path()).unwrap();
    assert!(
        !audit.contains("Quixote") && !audit.contains("discharge"),
        "no PHI in the audit log"
    );
    proxy.stop().await;
}
