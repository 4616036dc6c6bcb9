//! Cutting text into overlapping chunks at natural boundaries.

/// The default chunk size, in characters.
pub const DEFAULT_CHUNK_CHARS: usize = 1200;

/// The default overlap between consecutive chunks, in characters.
pub const DEFAULT_OVERLAP_CHARS: usize = 200;

/// A piece of a document's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The text, without whitespace at either end; never empty.
    pub text: String,
    /// Where it starts in the whole text, in characters (not bytes).
    pub start: usize,
    /// Its place among the text's chunks, from 0.
    pub index: usize,
}

/// Cuts `text` into chunks of at most `size` characters (at least 1) that follow each other
/// with about `overlap` characters in common (at most about half a chunk).
///
/// A chunk ends, by preference, at a paragraph break (a blank line), else after a sentence
/// (`.`, `!` or `?` before whitespace, or `。`, `！`, `？` anywhere), else at a line break,
/// else at whitespace, provided the chunk is still at least half of `size` long; otherwise it
/// is cut at `size` characters (text in Chinese or Japanese without punctuation, a long
/// token). The next chunk's overlap starts at a sentence or word where there is one. Chunks
/// are trimmed of whitespace, so text that is only whitespace gives no chunks.
pub fn chunk_text(text: &str, size: usize, overlap: usize) -> Vec<Chunk> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let size = size.max(1);
    let min_len = (size / 2).max(1);
    // Less than the shortest chunk, so that every chunk starts after the one before.
    let overlap = overlap.min(min_len - 1);

    let mut chunks = Vec::new();
    let mut pos = skip_whitespace(&chars, 0);
    while pos < n {
        let limit = (pos + size).min(n);
        let end = if limit == n {
            n
        } else {
            best_cut(&chars, pos + min_len, limit)
        };
        let mut trimmed_end = end;
        while trimmed_end > pos && chars[trimmed_end - 1].is_whitespace() {
            trimmed_end -= 1;
        }
        if trimmed_end > pos {
            chunks.push(Chunk {
                text: chars[pos..trimmed_end].iter().collect(),
                start: pos,
                index: chunks.len(),
            });
        }
        if end >= n {
            break;
        }
        let next = overlap_start(&chars, end.saturating_sub(overlap).max(pos + 1), end);
        pos = skip_whitespace(&chars, next);
    }
    chunks
}

fn skip_whitespace(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Where to end a chunk that may end anywhere in `from..=limit` (`limit < chars.len()`): the
/// best boundary, the last one of its kind.
fn best_cut(chars: &[char], from: usize, limit: usize) -> usize {
    let window = || (from..=limit).rev();
    // A paragraph break: a line break with another before it, only blanks between.
    let paragraph = window().find(|&i| {
        chars[i] == '\n' && {
            let mut j = i;
            while j > 0 && chars[j - 1] != '\n' && chars[j - 1].is_whitespace() {
                j -= 1;
            }
            j > 0 && chars[j - 1] == '\n'
        }
    });
    paragraph
        .or_else(|| window().find(|&i| sentence_end_at(chars, i)))
        .or_else(|| window().find(|&i| chars[i] == '\n'))
        .or_else(|| window().find(|&i| chars[i].is_whitespace()))
        .unwrap_or(limit)
}

/// Whether a sentence ends just before `i`: after `.`, `!` or `?` (and any closing quotes or
/// brackets) followed by whitespace or the end, or after `。`, `！` or `？`.
fn sentence_end_at(chars: &[char], i: usize) -> bool {
    let mut j = i;
    while j > 0 && is_closing(chars[j - 1]) {
        j -= 1;
    }
    if j == 0 {
        return false;
    }
    match chars[j - 1] {
        '。' | '！' | '？' => true,
        '.' | '!' | '?' => chars.get(i).is_none_or(|c| c.is_whitespace()),
        _ => false,
    }
}

fn is_closing(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '」' | '』' | '）' | '》')
}

/// Where the next chunk starts, given that the overlap would start at `from` and the chunk
/// before ended at `end`: at the first sentence start within the first half of the overlap,
/// else at the first word start, else at `from`.
fn overlap_start(chars: &[char], from: usize, end: usize) -> usize {
    if from >= end {
        return end;
    }
    let half = from + (end - from) / 2;
    if let Some(i) = (from..=half).find(|&i| sentence_end_at(chars, i)) {
        return i;
    }
    if from > 0 && chars[from - 1].is_whitespace() {
        return from;
    }
    (from..end).find(|&i| chars[i].is_whitespace()).unwrap_or(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk is the text at its offset, within the size, and the chunks cover every
    /// character that is not whitespace.
    fn check(text: &str, size: usize, overlap: usize) -> Vec<Chunk> {
        let chunks = chunk_text(text, size, overlap);
        let chars: Vec<char> = text.chars().collect();
        let mut covered = vec![false; chars.len()];
        for (i, chunk) in chunks.iter().enumerate() {
            assert_eq!(chunk.index, i);
            let len = chunk.text.chars().count();
            assert!(len > 0 && len <= size.max(1), "{chunk:?}");
            let at: String = chars[chunk.start..chunk.start + len].iter().collect();
            assert_eq!(at, chunk.text);
            assert_eq!(chunk.text.trim(), chunk.text);
            covered[chunk.start..chunk.start + len].fill(true);
        }
        for (c, seen) in chars.iter().zip(&covered) {
            assert!(*seen || c.is_whitespace(), "{c:?} not in any chunk");
        }
        chunks
    }

    #[test]
    fn tiny_and_empty_texts() {
        assert!(chunk_text("", 100, 10).is_empty());
        assert!(chunk_text(" \n\t\n  ", 100, 10).is_empty());
        let chunks = check("  Hello.  ", 100, 10);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, "Hello.");
        assert_eq!(chunks[0].start, 2);
        // A size of 0 is taken as 1.
        let chunks = check("abc", 0, 5);
        assert_eq!(
            chunks.iter().map(|c| &c.text[..]).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn paragraph_breaks_come_first() {
        let a = "First paragraph. It has two sentences.";
        let b = "Second paragraph is here. More words follow it.";
        let text = format!("{a}\n\n{b}");
        let chunks = check(&text, 60, 0);
        assert_eq!(chunks[0].text, a);
        assert_eq!(chunks[1].text, b);
        assert_eq!(chunks[1].start, a.chars().count() + 2);
    }

    #[test]
    fn then_sentence_ends_then_whitespace() {
        let text = "One sentence here. Another sentence follows and goes on.";
        let chunks = check(text, 30, 0);
        assert_eq!(chunks[0].text, "One sentence here.");
        // No sentence end in reach: the last space.
        let chunks = check("alpha beta gamma delta epsilon zeta eta theta", 20, 0);
        assert_eq!(chunks[0].text, "alpha beta gamma");
        assert!(chunks.iter().all(|c| !c.text.contains("  ")));
        // A dot inside a word is no sentence end.
        let chunks = check("version 1.2.3 is out and v2.0 too soon", 20, 0);
        assert_eq!(chunks[0].text, "version 1.2.3 is out");
    }

    #[test]
    fn consecutive_chunks_overlap() {
        let sentence = "The quick brown fox jumps over the lazy dog. ";
        let text = sentence.repeat(100);
        let chunks = check(&text, 300, 60);
        assert!(chunks.len() > 10);
        for pair in chunks.windows(2) {
            let prev_end = pair[0].start + pair[0].text.chars().count();
            assert!(pair[1].start > pair[0].start);
            let shared = prev_end.saturating_sub(pair[1].start);
            assert!((20..=60).contains(&shared), "overlap {shared}: {pair:?}");
            // The overlap starts at a sentence.
            assert!(pair[1].text.starts_with("The quick"), "{:?}", pair[1].text);
        }
        // Without overlap the chunks follow each other.
        let chunks = check(&text, 300, 0);
        for pair in chunks.windows(2) {
            assert!(pair[1].start >= pair[0].start + pair[0].text.chars().count());
        }
    }

    #[test]
    fn an_overlap_too_large_still_moves_forward() {
        let text = "word ".repeat(200);
        let chunks = check(&text, 20, 1000);
        assert!(chunks.len() > 50 && chunks.len() < 200, "{}", chunks.len());
    }

    #[test]
    fn chinese_is_cut_at_its_sentence_ends_or_at_the_size() {
        let text = "今天天气很好。我们去公园散步吧！你想一起去吗？".repeat(5);
        let chunks = check(&text, 30, 5);
        for chunk in &chunks[..chunks.len() - 1] {
            let last = chunk.text.chars().last().unwrap();
            assert!(matches!(last, '。' | '！' | '？'), "{:?}", chunk.text);
        }
        let no_punctuation = "汉".repeat(95);
        let chunks = check(&no_punctuation, 30, 5);
        assert_eq!(chunks.len(), 4);
        assert_eq!(chunks[0].text.chars().count(), 30);
        assert_eq!(chunks[1].start, 25);
    }

    #[test]
    fn a_huge_paragraph_without_breaks_is_cut_at_the_size() {
        let text = "x".repeat(5000);
        let chunks = check(&text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS);
        assert_eq!(chunks[0].text.len(), DEFAULT_CHUNK_CHARS);
        assert_eq!(chunks[1].start, DEFAULT_CHUNK_CHARS - DEFAULT_OVERLAP_CHARS);
        assert_eq!(chunks.len(), 5);
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        let text = "naïve café — 日本語のテキスト 🎉🎉🎉 ".repeat(40);
        check(&text, 17, 4);
        check(&text, 1, 0);
    }

    #[test]
    fn defaults_give_chunks_near_the_size() {
        let paragraph = "A sentence of moderate length sits here. ".repeat(8);
        let text = [paragraph.trim_end(); 12].join("\n\n");
        let chunks = check(&text, DEFAULT_CHUNK_CHARS, DEFAULT_OVERLAP_CHARS);
        for chunk in &chunks[..chunks.len() - 1] {
            assert!(chunk.text.chars().count() >= DEFAULT_CHUNK_CHARS / 2);
        }
    }
}
