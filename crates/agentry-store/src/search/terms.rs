//! The text full-text search sees. SQLite's `unicode61` tokenizer splits on spaces and
//! punctuation, which leaves Chinese, Japanese and Korean text as one token per sentence; each
//! of their characters is made a token of its own instead, so that a question and a memory
//! that share characters match.

/// Whether `c` is written without spaces between words (Han, kana, Hangul).
fn is_unspaced(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // Hiragana, Katakana
        | 0x3400..=0x4DBF   // CJK Extension A
        | 0x4E00..=0x9FFF   // CJK Unified Ideographs
        | 0xAC00..=0xD7AF   // Hangul syllables
        | 0xF900..=0xFAFF   // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F // CJK Extensions B to F
    )
}

/// `text` as it is indexed: lower case, each unspaced-script character apart.
pub fn indexed_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    for c in text.chars() {
        if is_unspaced(c) {
            out.push(' ');
            out.push(c);
            out.push(' ');
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Words that carry a question's grammar, not its subject. In a small collection bm25 cannot
/// tell them from content words, and "what is my job" would rank "my dog is Rex" first by its
/// "is" and "my"; fused with the ranking by meaning, that match outweighs the right one.
const FUNCTION_WORDS: &[&str] = &[
    "a", "about", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "here", "him", "his",
    "how", "i", "if", "in", "is", "it", "its", "me", "mine", "my", "no", "not", "of", "on", "or", "our",
    "she", "should", "so", "some", "tell", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "those", "to", "us", "was", "we", "were", "what", "when", "where", "which", "who",
    "whom", "whose", "why", "will", "with", "would", "you", "your", "的", "了", "是", "我", "你", "他", "她",
    "它", "们", "什", "么", "吗", "呢", "吧", "啊", "哪", "谁", "怎", "这", "那", "个", "在", "有",
];

/// The words of `query` as an FTS5 query that matches any of them (ranked by bm25, so rare
/// words weigh more), or `None` when it has no word. Function words are left out unless the
/// query has nothing else.
pub fn match_query(query: &str) -> Option<String> {
    let terms = query_terms(query);
    let content: Vec<&String> = terms
        .iter()
        .filter(|t| !FUNCTION_WORDS.contains(&t.as_str()))
        .collect();
    let terms: Vec<&String> = match content.is_empty() {
        true => terms.iter().collect(),
        false => content,
    };
    if terms.is_empty() {
        return None;
    }
    Some(
        terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "")))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

/// The distinct terms of `query`, in order.
fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for term in indexed_text(query).split(|c: char| !c.is_alphanumeric()) {
        if term.is_empty() || terms.iter().any(|t| t == term) {
            continue;
        }
        // A single Latin letter or digit matches too much to help.
        if term.chars().count() == 1 && !term.chars().any(is_unspaced) {
            continue;
        }
        terms.push(term.to_owned());
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_characters_become_terms_and_latin_words_stay_whole() {
        assert_eq!(indexed_text("Rex 是狗"), "rex  是  狗 ");
        assert_eq!(
            match_query("用户的狗?").as_deref(),
            Some("\"用\" OR \"户\" OR \"狗\"")
        );
        assert_eq!(
            match_query("What is my DOG's name, a?").as_deref(),
            Some("\"dog\" OR \"name\"")
        );
        // A query of function words only still searches for them.
        assert_eq!(
            match_query("Who is it?").as_deref(),
            Some("\"who\" OR \"is\" OR \"it\"")
        );
        assert_eq!(match_query("?? !"), None);
    }
}
