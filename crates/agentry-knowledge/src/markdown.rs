//! Markdown to plain text with pulldown-cmark: the words kept, the markup dropped, headings,
//! paragraphs, list items and table rows on lines of their own.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::read::tidy;

/// The text of a Markdown document and its title: the first heading, or else the front
/// matter's `title:`.
pub(crate) fn to_text(markdown: &str) -> (String, Option<String>) {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_DEFINITION_LIST;
    let mut w = Writer::default();
    for event in Parser::new_ext(markdown, options) {
        w.event(event);
    }
    let title = w.title.or_else(|| front_matter_title(&w.metadata));
    (tidy(&w.out), title)
}

/// The break owed before the next text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
enum Break {
    #[default]
    None,
    Line,
    Paragraph,
}

#[derive(Default)]
struct Writer {
    out: String,
    pending: Break,
    /// A list item's marker was just written: its paragraph starts on the same line.
    after_marker: bool,
    /// The next number of each open list, `None` for bullets.
    lists: Vec<Option<u64>>,
    /// The cells written in the current table row.
    cells: usize,
    /// The first heading's text while it is being read.
    heading: Option<String>,
    title: Option<String>,
    in_metadata: bool,
    metadata: String,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) if self.in_metadata => self.metadata.push_str(&t),
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
            Event::FootnoteReference(label) => self.text(&format!("[{label}]")),
            Event::SoftBreak | Event::HardBreak if self.heading.is_some() => self.text(" "),
            Event::SoftBreak | Event::HardBreak => self.text("\n"),
            Event::Rule => self.owe(Break::Paragraph),
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
            // Raw HTML is markup, not words.
            Event::Html(_) | Event::InlineHtml(_) => {}
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } => {
                self.owe(Break::Paragraph);
                if self.title.is_none() {
                    self.heading = Some(String::new());
                }
            }
            Tag::Paragraph
            | Tag::BlockQuote(_)
            | Tag::CodeBlock(_)
            | Tag::HtmlBlock
            | Tag::Table(_)
            | Tag::DefinitionList => self.owe(Break::Paragraph),
            Tag::List(first) => {
                self.owe(if self.lists.is_empty() {
                    Break::Paragraph
                } else {
                    Break::Line
                });
                self.lists.push(first);
            }
            Tag::Item => {
                self.owe(Break::Line);
                self.flush();
                let depth = self.lists.len().saturating_sub(1);
                self.out.push_str(&"  ".repeat(depth));
                match self.lists.last_mut() {
                    Some(Some(n)) => {
                        self.out.push_str(&format!("{n}. "));
                        *n += 1;
                    }
                    _ => self.out.push_str("- "),
                }
                self.after_marker = true;
            }
            Tag::FootnoteDefinition(label) => {
                self.owe(Break::Paragraph);
                self.text(&format!("[{label}] "));
                self.after_marker = true;
            }
            Tag::TableHead | Tag::TableRow => {
                self.owe(Break::Line);
                self.cells = 0;
            }
            Tag::TableCell => {
                if self.cells > 0 {
                    self.text(" | ");
                }
                self.cells += 1;
            }
            Tag::DefinitionListTitle | Tag::DefinitionListDefinition => self.owe(Break::Line),
            Tag::MetadataBlock(_) => self.in_metadata = true,
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) => {
                if let Some(heading) = self.heading.take() {
                    let heading = heading.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !heading.is_empty() {
                        self.title = Some(heading);
                    }
                }
                self.owe(Break::Paragraph);
            }
            TagEnd::Paragraph
            | TagEnd::BlockQuote(_)
            | TagEnd::CodeBlock
            | TagEnd::HtmlBlock
            | TagEnd::Table
            | TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList => self.owe(Break::Paragraph),
            TagEnd::List(_) => {
                self.lists.pop();
                self.owe(if self.lists.is_empty() {
                    Break::Paragraph
                } else {
                    Break::Line
                });
            }
            TagEnd::Item | TagEnd::TableHead | TagEnd::TableRow => self.owe(Break::Line),
            TagEnd::MetadataBlock(_) => self.in_metadata = false,
            _ => {}
        }
    }

    /// Asks for at least `brk` before the next text; right after a list marker, nothing.
    fn owe(&mut self, brk: Break) {
        if !self.after_marker {
            self.pending = self.pending.max(brk);
        }
    }

    fn flush(&mut self) {
        if !self.out.is_empty() {
            match self.pending {
                Break::None => {}
                Break::Line => self.out.push('\n'),
                Break::Paragraph => self.out.push_str("\n\n"),
            }
        }
        self.pending = Break::None;
    }

    fn text(&mut self, text: &str) {
        self.flush();
        self.after_marker = false;
        self.out.push_str(text);
        if let Some(heading) = &mut self.heading {
            heading.push_str(text);
        }
    }
}

/// The `title:` of YAML front matter, without quotes.
fn front_matter_title(metadata: &str) -> Option<String> {
    metadata.lines().find_map(|line| {
        let value = line.strip_prefix("title:")?.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value)
            .trim();
        (!value.is_empty()).then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_dropped_and_blocks_keep_their_lines() {
        let md = "\
# The *Guide*

Some **bold** text and a [link](https://example.com) with `code`.
A second line.

## Steps

1. First
2. Second
   - nested
- [x] done

> Quoted words.

```rust
fn main() {}
```

| Name | Value |
|------|-------|
| a    | 1     |

<div class=\"note\">raw html</div>

---
Last.[^1]

[^1]: The note.
";
        let (text, title) = to_text(md);
        assert_eq!(title.as_deref(), Some("The Guide"));
        let expected = "\
The Guide

Some bold text and a link with code.
A second line.

Steps

1. First
2. Second
  - nested

- [x] done

Quoted words.

fn main() {}

Name | Value
a | 1

Last.[1]

[1] The note.";
        assert_eq!(text, expected);
    }

    #[test]
    fn loose_list_items_start_on_their_marker_line() {
        let (text, _) = to_text("- one\n\n- two\n");
        assert_eq!(text, "- one\n\n- two");
    }

    #[test]
    fn title_is_the_first_heading_or_the_front_matter() {
        let (text, title) = to_text("---\ntitle: \"Notes\"\ntags: [a]\n---\n\nBody only.\n");
        assert_eq!(title.as_deref(), Some("Notes"));
        assert_eq!(text, "Body only.");

        let (_, title) = to_text("Intro.\n\n### Later heading\n\n# Top\n");
        assert_eq!(title.as_deref(), Some("Later heading"));

        let (_, title) = to_text("Setext title\n============\n\ntext\n");
        assert_eq!(title.as_deref(), Some("Setext title"));

        assert_eq!(to_text("no heading").1, None);
    }
}
