//! Text extraction per format (text, Markdown, CSV, HTML, PDF, DOCX), truncation, and damaged
//! documents failing with a clear error instead of a panic.

use std::io::Write;

use crate::tools::files::FilesError;
use crate::tools::files::backend::DocKind;
use crate::tools::files::extract::{MAX_DOCX_TEXT_BYTES, extract_text, truncate_chars};

fn sample(path: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data/files")
            .join(path),
    )
    .unwrap()
}

/// A DOCX with the given `word/document.xml`.
fn docx(document_xml: &str) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file(
        "word/document.xml",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    zip.write_all(document_xml.as_bytes()).unwrap();
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn shipped_samples_extract() {
    let pdf = extract_text(
        DocKind::Pdf,
        sample("Protocols/diabetes-management-protocol.pdf"),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        pdf.contains("Type 2 Diabetes Management Protocol") && pdf.contains("Metformin"),
        "{pdf}"
    );
    let letter = extract_text(
        DocKind::Docx,
        sample("Templates/referral-letter-template.docx"),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(letter.starts_with("Referral letter (template)"), "{letter}");
    assert!(
        letter.contains("Current medication:\t[list]"),
        "tabs kept: {letter}"
    );
    let html = extract_text(
        DocKind::Html,
        sample("Reference/hypoglycaemia-quick-guide.html"),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        html.contains("Hypoglycaemia quick guide\n") && html.contains("15–20 g"),
        "{html}"
    );
    assert!(
        !html.contains("console.log") && !html.contains("font-family") && !html.contains('<'),
        "{html}"
    );
    let csv = extract_text(DocKind::Csv, sample("Reference/clinic-phone-list.csv"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        csv.starts_with("service,extension,hours\nDiabetes nurse line,4410"),
        "{csv}"
    );
}

#[tokio::test]
async fn docx_runs_breaks_and_entities() {
    let xml = r#"<?xml version="1.0"?><w:document xmlns:w="x"><w:body>
        <w:p><w:r><w:t>Blood &amp; </w:t></w:r><w:r><w:t xml:space="preserve">urine</w:t></w:r></w:p>
        <w:p><w:r><w:t>a</w:t><w:br/><w:t>b&#233;</w:t></w:r></w:p></w:body></w:document>"#;
    let text = extract_text(DocKind::Docx, docx(xml))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text, "Blood & urine\na\nbé");
}

/// A DOCX under the 4 MiB a content search downloads whose body inflates to 60 MiB of `w:t`
/// text: only the first [`MAX_DOCX_TEXT_BYTES`] of text are collected (and the rest of the XML is
/// never inflated), not 64 MiB copied several times over.
#[tokio::test]
async fn a_docx_zip_bomb_is_read_only_up_to_the_text_cap() {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("word/document.xml", options).unwrap();
    zip.write_all(br#"<?xml version="1.0"?><w:document xmlns:w="x"><w:body>"#)
        .unwrap();
    let paragraph = format!("<w:p><w:r><w:t>{}</w:t></w:r></w:p>", "Glargine ".repeat(110));
    let chunk = paragraph.repeat((1 << 20) / paragraph.len() + 1);
    for _ in 0..60 {
        zip.write_all(chunk.as_bytes()).unwrap();
    }
    zip.write_all(b"</w:body></w:document>").unwrap();
    let bomb = zip.finish().unwrap().into_inner();
    assert!(bomb.len() < 4 << 20, "{} bytes", bomb.len());
    let text = extract_text(DocKind::Docx, bomb).await.unwrap().unwrap();
    assert!(text.len() <= MAX_DOCX_TEXT_BYTES, "{} bytes of text", text.len());
    assert!(text.len() > MAX_DOCX_TEXT_BYTES / 2, "{} bytes of text", text.len());
    assert!(text.starts_with("Glargine Glargine"));
}

#[tokio::test]
async fn damaged_documents_are_corrupt_not_panics() {
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    for (kind, bytes) in [
        (
            DocKind::Pdf,
            b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >>\ntrailer << /Root 1 0 R >>"
                .to_vec(),
        ),
        (DocKind::Pdf, garbage.clone()),
        (
            DocKind::Pdf,
            sample("Protocols/diabetes-management-protocol.pdf")[..900].to_vec(),
        ),
        (DocKind::Docx, garbage),
        (DocKind::Docx, docx("<w:document><w:p><w:t>unclosed</w:p>")),
        (
            DocKind::Docx,
            sample("Protocols/diabetes-management-protocol.pdf"),
        ),
    ] {
        assert!(
            matches!(extract_text(kind, bytes).await, Err(FilesError::Corrupt)),
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn other_kinds_have_no_text_and_invalid_utf8_is_replaced() {
    assert_eq!(
        extract_text(DocKind::Other, vec![0, 1, 2]).await.unwrap(),
        None
    );
    let text = extract_text(
        DocKind::PlainText,
        b"\xEF\xBB\xBFok \xFF\r\n\r\n\r\n\r\nend".to_vec(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(text, "ok \u{FFFD}\n\nend");
}

#[test]
fn truncation_counts_characters() {
    assert_eq!(truncate_chars("héllo".into(), 2), ("hé".to_string(), true));
    assert_eq!(truncate_chars("hé".into(), 2), ("hé".to_string(), false));
}

/// A PDF whose one stream inflates to 1 GiB of zeros (≈ 1 MiB on disk) is refused before the
/// parser would inflate it whole into memory.
#[tokio::test]
async fn a_pdf_that_inflates_beyond_the_budget_is_refused_before_parsing() {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..1024 {
        encoder.write_all(&zeros).unwrap();
    }
    let bomb = encoder.finish().unwrap();
    let mut pdf = format!(
        "%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n\
         3 0 obj << /Type /Page /Parent 2 0 R /Contents 4 0 R >> endobj\n4 0 obj << /Filter /FlateDecode /Length {} >>\nstream\n",
        bomb.len()
    )
    .into_bytes();
    pdf.extend_from_slice(&bomb);
    pdf.extend_from_slice(b"\nendstream\nendobj\ntrailer << /Root 1 0 R >>\n%%EOF\n");
    let started = std::time::Instant::now();
    assert!(matches!(extract_text(DocKind::Pdf, pdf).await, Err(FilesError::TooLarge { .. })));
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
}
