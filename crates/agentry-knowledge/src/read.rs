//! Reading a file as a document: its format, by extension or by a look at its bytes, and its
//! text.

use std::fmt;
use std::path::Path;

use crate::{ReadError, html, markdown, pdf};

/// How much of a file without a known extension [`sniff_text`] looks at.
pub(crate) const SNIFF_BYTES: usize = 8192;

/// The formats a document can be read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Plain text in UTF-8 (or UTF-16 with a byte-order mark).
    Text,
    /// Markdown (CommonMark with tables, footnotes and task lists).
    Markdown,
    /// An HTML page.
    Html,
    /// A PDF file with a text layer.
    Pdf,
}

impl Format {
    /// The format a file's extension stands for, in any case: `.txt`, `.text`, `.log`, `.csv`
    /// and `.rst` are [`Format::Text`], `.md` and `.markdown` [`Format::Markdown`], `.html` and
    /// `.htm` [`Format::Html`], `.pdf` [`Format::Pdf`]; `None` for any other extension or none.
    pub fn from_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "text" | "log" | "csv" | "rst" => Some(Self::Text),
            "md" | "markdown" => Some(Self::Markdown),
            "html" | "htm" => Some(Self::Html),
            "pdf" => Some(Self::Pdf),
            _ => None,
        }
    }

    /// The format's name for users: `text`, `Markdown`, `HTML` or `PDF`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Markdown => "Markdown",
            Self::Html => "HTML",
            Self::Pdf => "PDF",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A document's text, ready to be cut into chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The text a reader sees: markup removed, paragraphs separated by a blank line, lines
    /// ending in `\n`.
    pub text: String,
    /// The document's own title: an HTML page's `<title>`, a Markdown file's first heading
    /// (or its front matter's `title:`), a PDF's Title entry; `None` for plain text.
    pub title: Option<String>,
    /// The format it was read as.
    pub format: Format,
}

/// Reads the file at `path` as a document. The format comes from the extension
/// ([`Format::from_path`]); a file with any other extension is read as [`Format::Text`] when
/// it is valid UTF-8 without NUL bytes, and is [`ReadError::Unsupported`] otherwise.
///
/// Never panics, on damaged files either: a PDF that the PDF reader cannot handle is
/// [`ReadError::Unreadable`].
pub fn read_document(path: &Path) -> Result<Document, ReadError> {
    let bytes = std::fs::read(path).map_err(|e| ReadError::io(path, e))?;
    document_from_bytes(path, &bytes)
}

/// [`read_document`] of a file's content already read: `path` names it (in errors) and gives
/// its format.
pub fn document_from_bytes(path: &Path, bytes: &[u8]) -> Result<Document, ReadError> {
    let format = match Format::from_path(path) {
        Some(format) => format,
        None if sniff_text(bytes) => Format::Text,
        None => return Err(ReadError::unsupported(path)),
    };
    match format {
        Format::Text => Ok(Document {
            text: normalize_newlines(&decode_text(path, bytes)?),
            title: None,
            format,
        }),
        Format::Markdown => {
            let (text, title) = markdown::to_text(&decode_text(path, bytes)?);
            Ok(Document { text, title, format })
        }
        Format::Html => {
            let (text, title) = html::to_text(bytes).map_err(|e| ReadError::unreadable(path, e))?;
            Ok(Document { text, title, format })
        }
        Format::Pdf => {
            let (text, title) = pdf::to_text(bytes).map_err(|e| ReadError::unreadable(path, e))?;
            Ok(Document { text, title, format })
        }
    }
}

/// Whether `bytes` (a whole file, or its first [`SNIFF_BYTES`]) look like text: UTF-16 with a
/// byte-order mark, or UTF-8 without NUL bytes (a character cut at the end of the sample is
/// allowed).
pub(crate) fn sniff_text(bytes: &[u8]) -> bool {
    if utf16_bom(bytes).is_some() {
        return true;
    }
    if bytes.contains(&0) {
        return false;
    }
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        // A character cut by the end of a sample.
        Err(e) => e.error_len().is_none() && bytes.len() - e.valid_up_to() < 4,
    }
}

fn utf16_bom(bytes: &[u8]) -> Option<bool> {
    match bytes {
        [0xFF, 0xFE, ..] => Some(false),
        [0xFE, 0xFF, ..] => Some(true),
        _ => None,
    }
}

/// The text of a text or Markdown file: UTF-8 (a byte-order mark dropped), or UTF-16 with a
/// byte-order mark; anything else is [`ReadError::Unreadable`].
fn decode_text(path: &Path, bytes: &[u8]) -> Result<String, ReadError> {
    if let Some(big_endian) = utf16_bom(bytes) {
        let units: Vec<u16> = bytes[2..]
            .chunks_exact(2)
            .map(|p| {
                let pair = [p[0], p[1]];
                if big_endian {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            })
            .collect();
        return String::from_utf16(&units).map_err(|_| ReadError::unreadable(path, "damaged UTF-16 text"));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.contains(&0) {
        return Err(ReadError::unreadable(path, "binary data, not text"));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => Err(ReadError::unreadable(
            path,
            format!(
                "not UTF-8 text (invalid byte at offset {}); save it as UTF-8",
                e.valid_up_to()
            ),
        )),
    }
}

/// `\r\n` and lone `\r` as `\n`.
pub(crate) fn normalize_newlines(text: &str) -> String {
    if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        text.to_owned()
    }
}

/// Tidies extracted text: newlines normalised, trailing spaces cut from every line, at most
/// one blank line in a row, no blank lines at the start or end.
pub(crate) fn tidy(text: &str) -> String {
    let text = normalize_newlines(text);
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank_run > 0 { "\n\n" } else { "\n" });
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_extensions_in_any_case() {
        let f = |p: &str| Format::from_path(Path::new(p));
        assert_eq!(f("a.txt"), Some(Format::Text));
        assert_eq!(f("a.LOG"), Some(Format::Text));
        assert_eq!(f("a.csv"), Some(Format::Text));
        assert_eq!(f("a.rst"), Some(Format::Text));
        assert_eq!(f("a.Md"), Some(Format::Markdown));
        assert_eq!(f("a.markdown"), Some(Format::Markdown));
        assert_eq!(f("a.htm"), Some(Format::Html));
        assert_eq!(f("dir.d/a.HTML"), Some(Format::Html));
        assert_eq!(f("a.pdf"), Some(Format::Pdf));
        assert_eq!(f("a.rs"), None);
        assert_eq!(f("Makefile"), None);
        assert_eq!(Format::Html.to_string(), "HTML");
    }

    #[test]
    fn sniffing_tells_text_from_binary() {
        assert!(sniff_text(b"plain words\n"));
        assert!(sniff_text("中文".as_bytes()));
        assert!(sniff_text(b""));
        assert!(sniff_text(b"\xFF\xFEh\0i\0"));
        // A character cut by the end of a sample.
        assert!(sniff_text(&"ab中".as_bytes()[..4]));
        assert!(!sniff_text(b"ab\0cd"));
        assert!(!sniff_text(b"\x89PNG\r\n\x1a\n"));
        assert!(!sniff_text(b"caf\xE9 au lait"));
    }

    #[test]
    fn text_is_decoded_from_utf8_and_utf16() {
        let p = Path::new("t.txt");
        assert_eq!(decode_text(p, b"\xEF\xBB\xBFhi").ok(), Some("hi".to_owned()));
        assert_eq!(decode_text(p, b"\xFF\xFEh\0i\0").ok(), Some("hi".to_owned()));
        assert_eq!(decode_text(p, b"\xFE\xFF\0h\0i").ok(), Some("hi".to_owned()));
        let err = decode_text(p, b"caf\xE9").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("cannot read t.txt: not UTF-8 text (invalid byte at offset 3); save it as UTF-8")
        );
        let err = decode_text(p, b"a\0b").err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("cannot read t.txt: binary data, not text"));
    }

    #[test]
    fn tidy_keeps_one_blank_line_between_paragraphs() {
        assert_eq!(tidy("\n\n  a  \r\nb\n\n\n\nc\t\n\n"), "  a\nb\n\nc".to_owned());
        assert_eq!(tidy(" \n \n"), "");
    }
}
