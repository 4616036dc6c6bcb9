//! The text full-text search sees. SQLite's `unicode61` tokenizer splits on spaces and
//! punctuation, which leaves Chinese, Japanese and Korean text as one token per sentence; each
//! of their characters and each pair of neighbours is made a term instead, and questions are
//! searched by their pairs, so that a question and a memory that share a word match and two
//! texts that merely share a common character do not.

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

/// `text` as it is indexed: lower case; each unspaced-script character a term, and each two
/// neighbours a term too (as search engines index Chinese: "的狗" matches the dog, "的" alone
/// matches everything).
pub fn indexed_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    let mut run: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_unspaced(c) {
            run.push(c);
            continue;
        }
        push_run(&mut out, &mut run);
        out.extend(c.to_lowercase());
    }
    push_run(&mut out, &mut run);
    out
}

/// Writes a run of unspaced characters as its characters and its pairs, and empties it.
fn push_run(out: &mut String, run: &mut Vec<char>) {
    if run.is_empty() {
        return;
    }
    for c in run.iter() {
        out.push(' ');
        out.push(*c);
    }
    for pair in run.windows(2) {
        out.push(' ');
        out.extend(pair);
    }
    out.push(' ');
    run.clear();
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
    match_expression(&search_terms(query))
}

/// The terms of `query` that are searched for: its terms without the function words, unless
/// it has nothing else.
pub fn search_terms(query: &str) -> Vec<String> {
    let terms = query_terms(query);
    let content: Vec<String> = terms
        .iter()
        .filter(|t| !FUNCTION_WORDS.contains(&t.as_str()))
        .cloned()
        .collect();
    match content.is_empty() {
        true => terms,
        false => content,
    }
}

/// An FTS5 query matching any of `terms`, or `None` when there is none.
pub fn match_expression(terms: &[String]) -> Option<String> {
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

/// The distinct terms of `query`, in order: its words, and for unspaced scripts the pairs of
/// neighbouring characters (a lone character stands for itself). A pair of two function
/// characters ("什么") is left out as a function word.
fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut push = |term: String| {
        if !term.is_empty() && !terms.contains(&term) {
            terms.push(term);
        }
    };
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let mut latin = String::new();
        let mut run: Vec<char> = Vec::new();
        for c in word.chars().chain(std::iter::once(' ')) {
            if is_unspaced(c) {
                if latin.chars().count() > 1 {
                    push(std::mem::take(&mut latin));
                }
                latin.clear();
                run.push(c);
                continue;
            }
            match run.len() {
                0 => {}
                1 => push(run[0].to_string()),
                _ => {
                    for pair in run.windows(2) {
                        let function = pair
                            .iter()
                            .all(|c| FUNCTION_WORDS.contains(&c.to_string().as_str()));
                        if !function {
                            push(pair.iter().collect());
                        }
                    }
                }
            }
            run.clear();
            if c != ' ' {
                latin.extend(c.to_lowercase());
            }
        }
        // A single Latin letter or digit matches too much to help.
        if latin.chars().count() > 1 {
            push(latin);
        }
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_characters_and_their_pairs_become_terms_and_latin_words_stay_whole() {
        assert_eq!(indexed_text("Rex 是狗."), "rex  是 狗 是狗 .");
        assert_eq!(
            match_query("用户的狗?").as_deref(),
            Some("\"用户\" OR \"户的\" OR \"的狗\"")
        );
        // "我的" and "什么" are function words; a lone character stands for itself.
        assert_eq!(
            match_query("我的狗叫什么? 狗").as_deref(),
            Some("\"的狗\" OR \"狗叫\" OR \"叫什\" OR \"狗\"")
        );
        assert_eq!(
            match_query("特斯拉Model3").as_deref(),
            Some("\"特斯\" OR \"斯拉\" OR \"model3\"")
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
