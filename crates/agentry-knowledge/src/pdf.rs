//! PDF to text with pdf-extract (on lopdf): the text layer, page after page.

use pdf_extract::{Document, Object, PlainTextOutput};

use crate::read::tidy;

/// How far into a file its `%PDF-` header may start.
const HEADER_SCAN_BYTES: usize = 1024;

/// The text of a PDF and its Title entry; `Err` holds the reason for users.
pub(crate) fn to_text(bytes: &[u8]) -> Result<(String, Option<String>), String> {
    let head = &bytes[..bytes.len().min(HEADER_SCAN_BYTES)];
    if !head.windows(5).any(|w| w == b"%PDF-") {
        return Err("not a PDF file (no %PDF- header)".to_owned());
    }
    crate::without_panics("PDF", || {
        let mut doc = Document::load_mem(bytes).map_err(|e| format!("damaged PDF: {e}"))?;
        if doc.is_encrypted() && doc.decrypt("").is_err() {
            return Err("the PDF is protected by a password".to_owned());
        }
        let title = info_title(&doc);
        let mut raw = String::new();
        pdf_extract::output_doc(&doc, &mut PlainTextOutput::new(&mut raw))
            .map_err(|e| format!("damaged PDF: {e}"))?;
        let text = tidy(&raw);
        if text.is_empty() && !doc.get_pages().is_empty() {
            return Err("the PDF has no text layer (a scanned document?)".to_owned());
        }
        Ok((text, title))
    })
}

/// The document information dictionary's Title, when it has a non-blank one.
fn info_title(doc: &Document) -> Option<String> {
    let info = match doc.trailer.get(b"Info").ok()? {
        Object::Reference(id) => doc.get_object(*id).ok()?,
        other => other,
    };
    let title = pdf_extract::decode_text_string(info.as_dict().ok()?.get(b"Title").ok()?).ok()?;
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_a_pdf_header_is_refused() {
        let err = to_text(b"hello").err();
        assert_eq!(err.as_deref(), Some("not a PDF file (no %PDF- header)"));
    }

    #[test]
    fn damaged_pdfs_are_errors_not_panics() {
        for bytes in [
            &b"%PDF-1.4\n"[..],
            b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF",
            b"%PDF-1.7\n\xff\xfe garbage \x00\x01 xref 0 9999999 trailer << /Size -1 >> startxref 3 %%EOF",
        ] {
            let result = to_text(bytes);
            assert!(result.is_err(), "{result:?}");
        }
    }
}
