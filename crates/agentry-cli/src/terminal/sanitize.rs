//! Making text from a model, a tool or a server safe to print: every character a terminal would
//! act on is shown as an escape (`\e`, `\r`, `\x07`, `\u{202e}`), and long text is shortened with
//! its total length, so that nobody but agentry moves the cursor, clears a line, sets the window
//! title or reorders what the user reads (an approval question must show what will run).

use std::fmt::Write;

/// Characters shown of a tool name.
pub const NAME_CHARS: usize = 60;

/// Whether a terminal acts on `c` instead of just showing it: C0 controls, DEL, C1 controls,
/// the Unicode line and paragraph separators, and the bidirectional embeddings, overrides and
/// isolates (U+202A-U+202E, U+2066-U+2069). Newline and tab are decided by the caller.
fn is_terminal_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\u{1b}' => out.push_str("\\e"),
        '\r' => out.push_str("\\r"),
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` with every terminal control escaped except newlines and tabs: for multi-line text
/// such as the streamed answer or a preview. Works on any piece of a text on its own, since each
/// character is escaped by itself.
pub fn multiline(text: &str) -> String {
    escape_where(text, |c| c != '\n' && c != '\t' && is_terminal_control(c))
}

/// `text` on one line: every terminal control escaped, newlines and tabs too.
pub fn line(text: &str) -> String {
    escape_where(text, is_terminal_control)
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> String {
    if !text.chars().any(&escape) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` escaped on one line and cut to about `max` characters: the start, `…` and the total
/// length in characters of the original.
pub fn short(text: &str, max: usize) -> String {
    cut(&line(text), text.chars().count(), max)
}

/// `text` on one line with runs of whitespace (newlines included) as one space, escaped and cut
/// like [`short`].
pub fn summary(text: &str, max: usize) -> String {
    let flat = multiline(text).split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&line(&flat), text.chars().count(), max)
}

fn cut(escaped: &str, total: usize, max: usize) -> String {
    match escaped.char_indices().nth(max) {
        Some((at, _)) => format!("{}… ({total} chars)", &escaped[..at]),
        None => escaped.to_owned(),
    }
}

/// The lines of a multi-line `text` for showing indented: each line escaped and cut to
/// `line_max` characters, at most `max_lines` lines and then a line saying how many more there
/// are.
pub fn lines(text: &str, max_lines: usize, line_max: usize) -> Vec<String> {
    let all: Vec<&str> = text.lines().collect();
    let mut shown: Vec<String> = all.iter().take(max_lines).map(|l| short(l, line_max)).collect();
    if all.len() > max_lines {
        shown.push(format!("… ({} more lines)", all.len() - max_lines));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_not_obeyed() {
        assert_eq!(line("a\u{1b}[2K\rb"), "a\\e[2K\\rb");
        assert_eq!(line("bell\u{7} del\u{7f} nul\0"), "bell\\a del\\x7f nul\\x00");
        assert_eq!(line("c1 csi \u{9b}31m"), "c1 csi \\x9b31m");
        assert_eq!(
            line("\u{202e}evil\u{2066}x\u{2069}\u{2028}"),
            "\\u{202e}evil\\u{2066}x\\u{2069}\\u{2028}"
        );
        assert_eq!(line("two\nlines\ttab"), "two\\nlines\\ttab");
        assert_eq!(
            multiline("two\nlines\ttab\u{1b}]0;t\u{7}"),
            "two\nlines\ttab\\e]0;t\\a"
        );
        assert_eq!(line("plain ünïcode ✓"), "plain ünïcode ✓");
    }

    #[test]
    fn nothing_a_terminal_acts_on_is_left() {
        let every: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        for escaped in [
            line(&every),
            summary(&every, usize::MAX),
            short(&every, usize::MAX),
        ] {
            assert!(!escaped.chars().any(is_terminal_control));
        }
        assert!(
            !multiline(&every)
                .chars()
                .any(|c| c != '\n' && c != '\t' && is_terminal_control(c))
        );
    }

    #[test]
    fn long_text_is_cut_with_its_length() {
        assert_eq!(short("abcdef", 3), "abc… (6 chars)");
        assert_eq!(short("abc", 3), "abc");
        let name = "x".repeat(5000);
        assert_eq!(short(&name, 10), format!("{}… (5000 chars)", "x".repeat(10)));
        assert_eq!(summary("a  b\nc", 10), "a b c");
        assert_eq!(summary("a\r\nb", 10), "a\\r b");
        assert_eq!(summary("abcdef", 3), "abc… (6 chars)");
    }

    #[test]
    fn many_lines_are_cut_too() {
        let text = (1..=5)
            .map(|n| format!("line {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(lines(&text, 2, 100), ["line 1", "line 2", "… (3 more lines)"]);
        assert_eq!(lines("abcdef\n\u{1b}x", 10, 3), ["abc… (6 chars)", "\\ex"]);
    }
}
