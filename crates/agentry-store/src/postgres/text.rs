//! Text as PostgreSQL keeps it: its `text` cannot hold the NUL character, which a grant key
//! holds (tool name and arguments are joined by one) and a tool's output or a model's call id
//! may. Free text is written with `\` doubled and NUL as `\0`, and read back as it was.

use std::borrow::Cow;

/// `text` as written to a column.
pub(super) fn to_db(text: &str) -> Cow<'_, str> {
    if !text.contains(['\\', '\0']) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\0' => escaped.push_str("\\0"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// [`to_db`] of an optional text, owned.
pub(super) fn opt_to_db(text: Option<&str>) -> Option<String> {
    text.map(|t| to_db(t).into_owned())
}

/// A column's text as it was given to [`to_db`].
pub(super) fn from_db(text: String) -> String {
    if !text.contains('\\') {
        return text;
    }
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('0') => plain.push('\0'),
                Some(other) => plain.push(other),
                None => plain.push('\\'),
            },
            (c, false) => plain.push(c),
        }
    }
    plain
}

/// [`from_db`] of an optional column.
pub(super) fn opt_from_db(text: Option<String>) -> Option<String> {
    text.map(from_db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_text_reads_back_as_written() {
        for text in ["plain", "a\\b", "tool\0{\"a\":1}", "\\0", "\\\0\\", ""] {
            assert!(!to_db(text).contains('\0'));
            assert_eq!(from_db(to_db(text).into_owned()), text);
        }
    }
}
