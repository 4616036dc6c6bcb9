//! End-to-end tests of agentry-knowledge: files written to a temporary folder, found, read,
//! cut into chunks and hashed, as a knowledge base adds them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};

use agentry_knowledge::{
    DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS, Format, ReadError, chunk_text, collect_files, content_hash,
    read_document,
};

/// A minimal valid PDF: one page showing each of `lines` in Helvetica, with a Title entry,
/// and a correct cross-reference table.
fn minimal_pdf(title: &str, lines: &[&str]) -> Vec<u8> {
    let mut content = String::from("BT /F1 18 Tf 72 720 Td 24 TL\n");
    for line in lines {
        content.push_str(&format!("({line}) Tj T*\n"));
    }
    content.push_str("ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_owned(),
        format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_owned(),
        format!("<< /Title ({title}) /Producer (agentry-knowledge tests) >>"),
    ];
    let mut pdf = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R /Info 6 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn each_format_is_read_with_its_title() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let doc = read_document(&write(d, "a.txt", "Line one.\r\nLine two.\r\n")).unwrap();
    assert_eq!(doc.format, Format::Text);
    assert_eq!(doc.title, None);
    assert_eq!(doc.text, "Line one.\nLine two.\n");

    let doc = read_document(&write(
        d,
        "b.markdown",
        "Intro line.\n\n## Setup *fast*\n\nRun `make` and see [docs](http://x).\n",
    ))
    .unwrap();
    assert_eq!(doc.format, Format::Markdown);
    assert_eq!(doc.title.as_deref(), Some("Setup fast"));
    assert_eq!(doc.text, "Intro line.\n\nSetup fast\n\nRun make and see docs.");

    let doc = read_document(&write(
        d,
        "c.HTM",
        "<html><head><title>Help page</title><script>alert(1)</script></head>\
         <body><h1>Help</h1><p>Press the <b>red</b> button.</p></body></html>",
    ))
    .unwrap();
    assert_eq!(doc.format, Format::Html);
    assert_eq!(doc.title.as_deref(), Some("Help page"));
    assert_eq!(doc.text, "Help\n\nPress the red button.");

    let pdf = minimal_pdf(
        "Quarterly Report",
        &["Hello from a PDF.", "Revenue grew by 12 percent."],
    );
    let doc = read_document(&write(d, "d.pdf", &pdf)).unwrap();
    assert_eq!(doc.format, Format::Pdf);
    assert_eq!(doc.title.as_deref(), Some("Quarterly Report"));
    assert!(doc.text.contains("Hello from a PDF."), "{:?}", doc.text);
    assert!(doc.text.contains("Revenue grew by 12 percent."), "{:?}", doc.text);

    // No known extension: text when it looks like text.
    let doc = read_document(&write(d, "README", "Just words, 中文 too.")).unwrap();
    assert_eq!(doc.format, Format::Text);
    assert_eq!(doc.text, "Just words, 中文 too.");
}

#[test]
fn damaged_and_binary_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let binary = write(d, "photo.jpg", b"\xFF\xD8\xFF\xE0\0\x10JFIF\0\x01");
    let err = read_document(&binary).unwrap_err();
    assert!(matches!(err, ReadError::Unsupported { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a supported document (text, Markdown, HTML or PDF)",
            binary.display()
        )
    );

    let renamed = write(d, "data.txt", b"\x7FELF\x02\x01\x01\0\0\0");
    let err = read_document(&renamed).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot read {}: binary data, not text", renamed.display())
    );

    let pdf = minimal_pdf("T", &["Some text."]);
    let cases: [(&str, &[u8]); 4] = [
        ("empty.pdf", b""),
        ("fake.pdf", b"this is not a PDF at all"),
        ("truncated.pdf", &pdf[..pdf.len() / 2]),
        (
            "garbage.pdf",
            b"%PDF-1.5\n\x00\xFF\x13 obj << /Type /Pages /Kids [9 0 R >> trailer",
        ),
    ];
    for (name, bytes) in cases {
        let path = write(d, name, bytes);
        match read_document(&path) {
            Err(ReadError::Unreadable { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(!reason.is_empty());
                let message = ReadError::Unreadable { path: p, reason }.to_string();
                assert!(message.starts_with(&format!("cannot read {}: ", path.display())));
            }
            other => panic!("{name}: {other:?}"),
        }
    }

    let missing = d.join("missing.md");
    let err = read_document(&missing).unwrap_err();
    assert!(
        matches!(&err, ReadError::Io { path, .. } if path == &missing),
        "{err:?}"
    );
    assert_eq!(err.path(), missing);
}

#[test]
fn a_folder_is_collected_read_chunked_and_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let paragraph = "Knowledge bases answer questions from documents. ".repeat(12);
    let long = [paragraph.trim_end(); 8].join("\n\n");
    write(d, "docs/guide.md", format!("# Guide\n\n{long}\n"));
    write(d, "docs/faq.html", "<title>FAQ</title><p>Q: Why? A: Because.</p>");
    write(d, "docs/report.pdf", minimal_pdf("Report", &["Page text."]));
    write(d, "docs/broken.pdf", b"%PDF-1.4\ngarbage");
    write(d, "docs/blob.bin", b"\0\x01\x02\x03");
    write(d, "docs/.cache/skip.md", "hidden");
    write(d, "notes", "an extensionless note");
    #[cfg(unix)]
    std::os::unix::fs::symlink(d.join("nowhere.txt"), d.join("docs/dangling.txt")).unwrap();

    let (files, errors) = collect_files(&[d.join("docs"), d.join("notes"), d.join("absent")]);
    let names: Vec<_> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["broken.pdf", "faq.html", "guide.md", "report.pdf", "notes"]
    );
    let mut bad: Vec<_> = errors
        .iter()
        .map(|e| e.path().file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    bad.sort();
    let mut expected = vec!["absent", "blob.bin"];
    if cfg!(unix) {
        expected.push("dangling.txt");
    }
    assert_eq!(bad, expected, "{errors:?}");
    assert!(errors.iter().any(|e| matches!(e, ReadError::Unsupported { .. })));

    // Read everything, as a knowledge base would: the damaged PDF fails alone.
    let mut chunks_per_file = Vec::new();
    let mut failures = Vec::new();
    for file in &files {
        match read_document(file) {
            Ok(doc) => {
                let chunks = chunk_text(&doc.text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS);
                assert!(!chunks.is_empty(), "{file:?}");
                chunks_per_file.push((file.clone(), doc, chunks));
            }
            Err(e) => failures.push(e),
        }
    }
    assert_eq!(failures.len(), 1);
    assert!(failures[0].path().ends_with("broken.pdf"));
    assert!(failures[0].to_string().contains("damaged PDF"), "{}", failures[0]);

    let (_, guide, chunks) = chunks_per_file
        .iter()
        .find(|(f, ..)| f.ends_with("guide.md"))
        .unwrap();
    assert_eq!(guide.title.as_deref(), Some("Guide"));
    assert!(chunks.len() >= 4, "{}", chunks.len());
    let chars: Vec<char> = guide.text.chars().collect();
    for chunk in chunks {
        let len = chunk.text.chars().count();
        assert!(len <= DEFAULT_CHUNK_CHARS);
        assert_eq!(
            chars[chunk.start..chunk.start + len].iter().collect::<String>(),
            chunk.text
        );
        assert!(chunk.text.ends_with('.'), "{:?}", chunk.text);
    }

    // The content hash is what tells an unchanged file.
    let guide_path = d.join("docs/guide.md");
    let before = content_hash(&fs::read(&guide_path).unwrap());
    assert_eq!(before, content_hash(&fs::read(&guide_path).unwrap()));
    fs::write(&guide_path, "# Guide\n\nChanged.\n").unwrap();
    assert_ne!(before, content_hash(&fs::read(&guide_path).unwrap()));
    assert_eq!(before.len(), 64);
}
