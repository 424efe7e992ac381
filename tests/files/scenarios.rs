//! What both backends must do alike (by name, by type, nested folders, extraction, bounds, the
//! root), run against wsgidav and against the local backend on the same tree.

use super::*;

/// Everything both backends must do alike.
async fn scenarios(proxy: &TestProxy, backend: &str) {
    // By name: every word of the query counts, both protocol files come first, seed fields present.
    let files = search(proxy, json!({"query": "diabetes protocol"})).await;
    let found = paths(&files);
    assert!(found.len() >= 2, "{backend}: {found:?}");
    assert!(
        found[..2].contains(&"/Protocols/diabetes-management-protocol.pdf"),
        "{backend}: {found:?}"
    );
    assert!(
        found[..2].contains(&"/Protocols/diabetes-management-protocol.md"),
        "{backend}: {found:?}"
    );
    let pdf = files
        .iter()
        .find(|f| f["name"] == "diabetes-management-protocol.pdf")
        .unwrap();
    for field in ["file_id", "name", "path", "mime_type", "modified", "url"] {
        assert!(
            pdf[field].as_str().is_some_and(|v| !v.is_empty()),
            "{backend}: {field} in {pdf}"
        );
    }
    assert_eq!(pdf["mime_type"], "application/pdf");
    assert!(pdf["size"].as_u64().unwrap() > 1000);
    assert!(pdf["modified"].as_str().unwrap().ends_with('Z'));
    assert!(
        !pdf["file_id"].as_str().unwrap().contains("Protocols"),
        "file_id is opaque"
    );

    // By type.
    let pdfs = search(proxy, json!({"query": "protocol", "file_type": "pdf"})).await;
    assert_eq!(
        paths(&pdfs),
        ["/Protocols/diabetes-management-protocol.pdf"],
        "{backend}"
    );
    let docx = search(
        proxy,
        json!({"query": "letter", "file_type": "docx", "max_results": 5}),
    )
    .await;
    assert_eq!(
        paths(&docx),
        ["/Templates/referral-letter-template.docx"],
        "{backend}"
    );

    // By content: only with include_content, and inside PDF and DOCX too; nested folders walked.
    assert!(
        search(proxy, json!({"query": "glargine"})).await.is_empty(),
        "{backend}"
    );
    let by_text = search(proxy, json!({"query": "glargine", "include_content": true})).await;
    assert_eq!(
        paths(&by_text),
        ["/Clinic/Letters/2026/discharge-summary.txt"],
        "{backend}"
    );
    let hba1c = search(proxy, json!({"query": "SGLT2", "include_content": true})).await;
    let hba1c = paths(&hba1c);
    for expected in [
        "/Protocols/diabetes-management-protocol.pdf",
        "/Templates/referral-letter-template.docx",
    ] {
        assert!(
            hba1c.contains(&expected),
            "{backend}: {expected} not in {hba1c:?}"
        );
    }

    // The link out of the root is never listed, and its id does not read it.
    let all = search(proxy, json!({"query": "*", "max_results": 50})).await;
    assert!(
        !paths(&all).iter().any(|p| p.contains("escape")),
        "{backend}: {:?}",
        paths(&all)
    );
    let escape_id = format!("f1.{}", URL_SAFE_NO_PAD.encode("escape.txt"));
    let (status, body) = retrieve(proxy, json!({"file_id": escape_id})).await;
    assert_ne!(status, 200, "{backend}: {body}");
    assert!(!body.to_string().contains(OUTSIDE_SECRET), "{backend}");

    // Traversal and forged ids are refused before anything is read.
    for forged in [
        "../outside/secret.txt",
        "/etc/passwd",
        "Protocols/../../outside/secret.txt",
        "http://127.0.0.2/x",
    ] {
        let (status, body) = retrieve(
            proxy,
            json!({"file_id": format!("f1.{}", URL_SAFE_NO_PAD.encode(forged))}),
        )
        .await;
        assert_eq!(status, 422, "{backend}: {forged}: {body}");
        assert_eq!(body["error"]["code"], "invalid_arguments");
        assert!(!body.to_string().contains(OUTSIDE_SECRET));
    }
    let (status, _) = retrieve(proxy, json!({"file_id": "../../etc/passwd"})).await;
    assert_eq!(status, 422, "{backend}: not an id at all");

    // Extraction: PDF, DOCX, HTML (text only), with truncation.
    let pdf_id = pdf["file_id"].as_str().unwrap();
    let (status, read) = retrieve(proxy, json!({"file_id": pdf_id})).await;
    assert_eq!(status, 200, "{backend}: {read}");
    let text = read["content"].as_str().unwrap();
    assert!(
        text.contains("Metformin") && text.contains("Sick-day rules"),
        "{backend}: {text}"
    );
    assert_eq!(read["content_truncated"], false);
    assert_eq!(read["name"], "diabetes-management-protocol.pdf");
    assert_eq!(read["file_id"], pdf_id);
    assert_eq!(read["url"], pdf["url"]);
    let (_, cut) = retrieve(proxy, json!({"file_id": pdf_id, "max_chars": 40})).await;
    assert_eq!(
        cut["content"].as_str().unwrap().chars().count(),
        40,
        "{backend}: {cut}"
    );
    assert_eq!(cut["content_truncated"], true);
    let (_, raw) = retrieve(proxy, json!({"file_id": pdf_id, "extract_text": false})).await;
    assert_eq!(
        raw["content"],
        Value::Null,
        "{backend}: no text without extraction for a PDF"
    );

    let text = text_of(
        proxy,
        "referral",
        "/Templates/referral-letter-template.docx",
    )
    .await;
    assert!(
        text.contains("Referral letter (template)") && text.contains("Dear Dr [Name],"),
        "{backend}: {text}"
    );

    let text = text_of(
        proxy,
        "hypoglycaemia",
        "/Reference/hypoglycaemia-quick-guide.html",
    )
    .await;
    assert!(
        text.contains("15–20 g fast-acting carbohydrate"),
        "{backend}: {text}"
    );
    assert!(
        !text.contains('<') && !text.contains("console.log"),
        "{backend}: {text}"
    );

    // Bad days: a damaged PDF and a file over the size bound are clear backend errors.
    let broken_id = id_of(proxy, "broken", "/broken.pdf").await;
    let (status, broken) = retrieve(proxy, json!({"file_id": broken_id})).await;
    assert_eq!(
        (status, broken["error"]["code"].as_str()),
        (502, Some("backend_error")),
        "{backend}: {broken}"
    );
    assert!(
        broken["error"]["message"]
            .as_str()
            .unwrap()
            .contains("could not be read")
    );
    let big_id = id_of(proxy, "big", "/big.txt").await;
    let (status, big) = retrieve(proxy, json!({"file_id": big_id})).await;
    assert_eq!(status, 502, "{backend}: {big}");
    assert!(
        big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{backend}: {big}"
    );

    // Schema bounds.
    let (status, _) = invoke(
        proxy,
        "search_nextcloud_files",
        json!({"query": "x", "max_results": 500}),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = invoke(
        proxy,
        "search_nextcloud_files",
        json!({"query": "x", "sneaky": true}),
    )
    .await;
    assert_eq!(status, 422);
}

#[tokio::test]
async fn webdav_backend_against_wsgidav() {
    let proxy = TestProxy::start(&webdav_toml(PASSWORD)).await;
    scenarios(&proxy, "webdav").await;
    let (_, readyz) = proxy.http_get("/readyz").await;
    assert_eq!(readyz, "ready\n");
    let files = search(&proxy, json!({"query": "protocol", "file_type": "pdf"})).await;
    assert!(
        files[0]["url"].as_str().unwrap().starts_with(wsgidav_url()),
        "{files:?}"
    );
    proxy.stop().await;
}

/// A root named with non-ASCII and reserved characters: the configuration writes it raw (the url
/// crate sends `%C3%84rzte%20&%20Co%20(Team)`), wsgidav's hrefs encode `&`, `(` and `)` as well.
/// The files below are found and read all the same, and nothing outside that root is listed.
#[tokio::test]
async fn webdav_root_named_with_non_ascii_and_reserved_characters() {
    let toml = format!(
        "[backends.files]\nkind = \"webdav\"\nurl = \"{}Ärzte & Co (Team)/\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n{}",
        wsgidav_url(),
        common_toml()
    );
    let proxy = TestProxy::start(&toml).await;
    let all = search(&proxy, json!({"query": "*"})).await;
    assert_eq!(paths(&all), ["/Leitlinien/sepsis-leitfaden.txt"]);
    let text = text_of(&proxy, "leitlinien sepsis", "/Leitlinien/sepsis-leitfaden.txt").await;
    assert!(text.contains("Blutkulturen"), "{text}");
    proxy.stop().await;
}

#[tokio::test]
async fn local_backend_on_the_same_tree() {
    let proxy = TestProxy::start(&local_toml()).await;
    scenarios(&proxy, "local").await;
    proxy.stop().await;
}

/// A walk cut at its bounds (5000 files, 8 folder levels) leaves files out: both backends say so
/// (`truncated`) instead of presenting the list as complete; a walk within them does not.
#[tokio::test]
async fn a_walk_cut_at_its_bounds_says_it_was_truncated() {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("files-walk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (many, deep, small) = (base.join("many"), base.join("deep"), base.join("small"));
    std::fs::create_dir_all(many.join("Scans")).unwrap();
    for i in 0..=5000 {
        std::fs::write(many.join(format!("Scans/scan-{i:04}.txt")), "").unwrap();
    }
    let bottom = (1..=9).fold(deep.clone(), |path, level| path.join(format!("Level {level}")));
    std::fs::create_dir_all(&bottom).unwrap();
    std::fs::write(bottom.join("deep-note.txt"), "").unwrap();
    std::fs::write(deep.join("top-note.txt"), "").unwrap();
    std::fs::create_dir_all(small.join("Level 1")).unwrap();
    std::fs::write(small.join("Level 1/small-note.txt"), "").unwrap();

    let (_dav, url) = wsgidav_over(&base);
    for (tree, query, cut) in [("many", "scan", true), ("deep", "note", true), ("small", "note", false)] {
        let webdav = format!(
            "[backends.files]\nkind = \"webdav\"\nurl = \"{url}{tree}/\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\n"
        );
        let local = format!("[backends.files]\nroot = \"{}\"\n", base.join(tree).display());
        for backend in [webdav, local] {
            let proxy = TestProxy::start(&format!("{backend}{}", common_toml())).await;
            let (status, result) = invoke(&proxy, "search_nextcloud_files", json!({"query": query, "max_results": 5})).await;
            assert_eq!(status, 200, "{backend}: {result}");
            assert!(!result["files"].as_array().unwrap().is_empty(), "{backend}: {result}");
            if cut {
                assert_eq!(result["truncated"], true, "{backend}: {result}");
            } else {
                assert!(result.get("truncated").is_none(), "{backend}: {result}");
            }
            proxy.stop().await;
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}
