//! HTML to the text a browser shows, with html2text: scripts, styles and the head dropped,
//! headings, paragraphs, list items and table rows on lines of their own. The title comes from
//! html5ever's tokenizer (the parser html2text is built on).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, CharacterTokens, EndTag, StartTag, TagToken, Token, TokenSink, TokenSinkResult, Tokenizer,
    TokenizerOpts,
};

use html2text::render::TextDecorator;
use html2text::{Element, Handle};

use crate::read::tidy;

/// The width html2text lays text out in: wide enough that it hardly ever wraps a paragraph.
const WIDTH: usize = 10_000;

/// How far into a page that is not UTF-8 its `<meta charset>` is looked for.
const CHARSET_SCAN_BYTES: usize = 4096;

/// The visible text of an HTML page and its `<title>`; `Err` holds the reason for users.
pub(crate) fn to_text(bytes: &[u8]) -> Result<(String, Option<String>), String> {
    let html = decode(bytes);
    let title = title(&html);
    let text = crate::without_panics("HTML", || {
        let damaged = |e: html2text::Error| format!("damaged HTML: {e}");
        let config = html2text::config::with_decorator(Bare).allow_width_overflow();
        let dom = config.parse_html(html.as_bytes()).map_err(damaged)?;
        prune(&dom.document);
        let tree = config.dom_to_render_tree(&dom).map_err(damaged)?;
        config.render_to_string(tree, WIDTH).map_err(damaged)
    })?;
    Ok((tidy(&text), title))
}

/// Removes what a browser does not show, and html2text would: `<noscript>` (scripts run in
/// browsers), `<template>`, and elements marked `hidden` or `aria-hidden="true"`.
fn prune(root: &Handle) {
    let mut stack = vec![root.clone()];
    while let Some(node) = stack.pop() {
        node.children.borrow_mut().retain(|child| !is_unseen(child));
        stack.extend(node.children.borrow().iter().cloned());
    }
}

fn is_unseen(node: &Handle) -> bool {
    let Element { name, attrs, .. } = &node.data else {
        return false;
    };
    if matches!(&*name.local, "noscript" | "template") {
        return true;
    }
    attrs.borrow().iter().any(|a| match &*a.name.local {
        "hidden" => true,
        "aria-hidden" => a.value.eq_ignore_ascii_case("true"),
        _ => false,
    })
}

/// html2text's decorations for plain text: the words of links, emphasis, headings and quotes
/// without marks, images by their alt text, list items with `- ` or their number.
#[derive(Clone, Copy)]
struct Bare;

impl TextDecorator for Bare {
    type Annotation = ();

    fn decorate_link_start(&mut self, _url: &str) -> (String, ()) {
        (String::new(), ())
    }
    fn decorate_link_end(&mut self) -> String {
        String::new()
    }
    fn decorate_em_start(&self) -> (String, ()) {
        (String::new(), ())
    }
    fn decorate_em_end(&self) -> String {
        String::new()
    }
    fn decorate_strong_start(&self) -> (String, ()) {
        (String::new(), ())
    }
    fn decorate_strong_end(&self) -> String {
        String::new()
    }
    fn decorate_strikeout_start(&self) -> (String, ()) {
        (String::new(), ())
    }
    fn decorate_strikeout_end(&self) -> String {
        String::new()
    }
    fn decorate_code_start(&self) -> (String, ()) {
        (String::new(), ())
    }
    fn decorate_code_end(&self) -> String {
        String::new()
    }
    fn decorate_preformat_first(&self) {}
    fn decorate_preformat_cont(&self) {}
    fn decorate_image(&mut self, _src: &str, title: &str) -> (String, ()) {
        (title.to_owned(), ())
    }
    fn header_prefix(&self, _level: usize) -> String {
        String::new()
    }
    fn quote_prefix(&self) -> String {
        String::new()
    }
    fn unordered_item_prefix(&self) -> String {
        "- ".to_owned()
    }
    fn ordered_item_prefix(&self, i: i64) -> String {
        format!("{i}. ")
    }
    fn make_subblock_decorator(&self) -> Self {
        Bare
    }
}

/// The page as text: by its byte-order mark, as UTF-8, or else in its `<meta charset>`
/// (windows-1252 when it names none, as browsers do).
fn decode(bytes: &[u8]) -> Cow<'_, str> {
    if let Some((encoding, bom)) = encoding_rs::Encoding::for_bom(bytes) {
        return encoding.decode_without_bom_handling(&bytes[bom..]).0;
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let head = &bytes[..bytes.len().min(CHARSET_SCAN_BYTES)];
    let encoding = meta_charset(head)
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()))
        .unwrap_or(encoding_rs::WINDOWS_1252);
    encoding.decode_without_bom_handling(bytes).0
}

/// The label after the first `charset=` in `head`, as in `<meta charset="koi8-r">` or
/// `<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">`.
fn meta_charset(head: &[u8]) -> Option<String> {
    let lower = head.to_ascii_lowercase();
    let at = lower.windows(8).position(|w| w == b"charset=")? + 8;
    let rest = &lower[at..];
    let rest = rest
        .strip_prefix(b"\"")
        .or(rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let label: String = rest
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'))
        .map(|&b| char::from(b))
        .collect();
    (!label.is_empty()).then_some(label)
}

/// The text of the page's first `<title>` before its body, whitespace collapsed; `None` when
/// there is none or it is blank.
fn title(html: &str) -> Option<String> {
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    let tokenizer = Tokenizer::new(TitleSink::default(), TokenizerOpts::default());
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    let text = tokenizer.sink.text.take();
    let title = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

/// Collects the first `<title>`'s characters, switching the tokenizer into the states a tree
/// builder would (so that a `<title>` inside a script or a comment is not taken).
#[derive(Default)]
struct TitleSink {
    inside: Cell<bool>,
    done: Cell<bool>,
    text: RefCell<String>,
}

impl TokenSink for TitleSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line_number: u64) -> TokenSinkResult<()> {
        match token {
            TagToken(tag) => match (tag.kind, &*tag.name) {
                (StartTag, "title") if !self.done.get() => {
                    self.inside.set(true);
                    return TokenSinkResult::RawData(RawKind::Rcdata);
                }
                (EndTag, "title") if self.inside.get() => {
                    self.inside.set(false);
                    self.done.set(true);
                }
                // An inline SVG's <title> is not the page's.
                (StartTag, "body" | "svg") => self.done.set(true),
                (StartTag, "textarea") => return TokenSinkResult::RawData(RawKind::Rcdata),
                (StartTag, "script") => return TokenSinkResult::RawData(RawKind::ScriptData),
                (StartTag, "style" | "xmp" | "iframe" | "noembed" | "noframes") => {
                    return TokenSinkResult::RawData(RawKind::Rawtext);
                }
                (StartTag, "plaintext") => return TokenSinkResult::Plaintext,
                _ => {}
            },
            CharacterTokens(text) if self.inside.get() => self.text.borrow_mut().push_str(&text),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_text_keeps_headings_and_paragraphs() {
        let html = r#"<!DOCTYPE html>
<html><head><title> The   Page &amp; Co </title>
<style>body { color: red }</style>
<script>var title = "<title>not this</title>";</script></head>
<body>
<h1>Main heading</h1>
<p>First paragraph with <b>bold</b> and <a href="https://example.com">a link</a>.</p>
<p>Second
paragraph.</p>
<ul><li>one</li><li>two</li></ul>
<script>document.write("hidden")</script>
<noscript>no script</noscript><div hidden>not shown</div><span aria-hidden="true">icon</span>
<blockquote>Quoted <em>words</em> <img src="x.png" alt="a picture"></blockquote>
<ol><li>first</li><li>second</li></ol>
<h2>Sub</h2><div>Last words</div>
</body></html>"#;
        let (text, title) = to_text(html.as_bytes()).unwrap();
        assert_eq!(title.as_deref(), Some("The Page & Co"));
        assert!(!text.contains("color"), "{text}");
        assert!(!text.contains("hidden"), "{text}");
        assert_eq!(
            text,
            "Main heading\n\nFirst paragraph with bold and a link.\n\nSecond paragraph.\n- one\n\
             - two\n\nQuoted words a picture\n1. first\n2. second\n\nSub\n\nLast words"
        );
    }

    #[test]
    fn title_is_the_heads_and_may_be_missing() {
        assert_eq!(title("<p>no title</p>"), None);
        assert_eq!(title("<title>  </title>"), None);
        assert_eq!(
            title("<!-- <title>comment</title> --><title>a <b> b</title>").as_deref(),
            Some("a <b> b")
        );
        assert_eq!(title("<body><svg><title>icon</title></svg></body>"), None);
    }

    #[test]
    fn legacy_charsets_are_decoded() {
        assert_eq!(
            meta_charset(b"<meta charset=\"ISO-8859-1\">").as_deref(),
            Some("iso-8859-1")
        );
        assert_eq!(
            meta_charset(b"<meta content='text/html; charset=koi8-r'>").as_deref(),
            Some("koi8-r")
        );
        let page = b"<meta charset=\"iso-8859-1\"><title>Caf\xE9</title><p>cr\xE8me</p>";
        let (text, title) = to_text(page).unwrap();
        assert_eq!(title.as_deref(), Some("Café"));
        assert_eq!(text, "crème");
        // No charset named: windows-1252, as browsers read it.
        assert_eq!(to_text(b"<p>na\xEFve</p>").unwrap().0, "naïve");
    }
}
