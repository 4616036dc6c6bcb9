//! The BERT encoder of multilingual-e5-small over the file's 4-bit weights, with mean pooling
//! and L2 normalisation.
//!
//! The encoder layers' Q4_0 weights are expanded to f32 once, at load (85 MB; expanding them
//! before each product took a tenth of the time), and stored transposed, `(in, out)`, the
//! layout gemm's kernel reads without repacking. The 250,000-row word embedding stays in its
//! Q4_0 blocks (54 MB; 384 MB in f32), and only the rows of the tokens being run are expanded.
//! The products, the attention and the norms run in f32, so the vectors are those of the f32
//! model that the 4-bit weights describe. (candle's quantized product, `QMatMul`, rounds the
//! activations to 8 bits: its vectors were 1e-3 off the f32 ones, and it ran at half the speed.)
//!
//! The texts of a batch are packed one after the other, without padding: the matrix products
//! run on all their tokens at once, the attention text by text and head by head. This is what
//! padding and an attention mask compute, without the padded positions.
//!
//! The work is split into tasks for rayon's threads by hand: a product by rows of tokens (or,
//! for a few tokens, by output columns), each task finishing its rows (bias, GELU, residual and
//! norm) while they are in the cache; the attention by text and head.

use rayon::prelude::*;

use crate::file::{ModelFile, Q4_BLOCK, Q4_BLOCK_BYTES, dequantize_q4_0};
use crate::matmul::{Matrix, multiply};
use crate::ops::{LayerNorm, add_bias_norm, bias_gelu, qkv_bias, softmax};
use crate::tiles::{TILE, Tiles};

type Result<T> = std::result::Result<T, String>;

/// Tokens per task of a product, at least: below this many tokens per thread, a product reads
/// the 4-bit copy of the weights and is split by output columns instead (a 11-token query took
/// 22 ms on one thread with the f32 copy, 15 ms with the 4-bit one).
const MIN_ROWS_PER_TASK: usize = 32;

/// A weight matrix (one or more of the file's `(out, in)` matrices stacked) and its bias:
/// `y = x W^T + b`.
struct Linear {
    /// `W^T`, `(inputs, outputs)` row by row.
    transposed: Vec<f32>,
    /// The same weights in 4 bits, which a few tokens' product reads.
    tiles: Tiles,
    inputs: usize,
    outputs: usize,
    bias: Vec<f32>,
}

impl Linear {
    fn load(file: &ModelFile, names: &[&str], rows: usize, columns: usize) -> Result<Self> {
        let outputs = rows * names.len();
        let mut transposed = vec![0f32; columns * outputs];
        let mut bias = Vec::with_capacity(outputs);
        let mut row = vec![0f32; columns];
        let mut all_blocks = Vec::new();
        for (m, name) in names.iter().enumerate() {
            let blocks = file.q4_0(&format!("{name}.w"), rows, columns)?;
            all_blocks.extend_from_slice(blocks);
            let row_bytes = columns / Q4_BLOCK * Q4_BLOCK_BYTES;
            for (r, blocks) in blocks.chunks_exact(row_bytes).enumerate() {
                dequantize_q4_0(blocks, &mut row);
                let o = m * rows + r;
                for (i, v) in row.iter().enumerate() {
                    transposed[i * outputs + o] = *v;
                }
            }
            bias.extend(file.f32s(&format!("{name}.b"), rows)?);
        }
        Ok(Linear {
            transposed,
            tiles: Tiles::new(&all_blocks, outputs, columns)?,
            inputs: columns,
            outputs,
            bias,
        })
    }

    /// `out = x W^T` for `(tokens, inputs)` `x`, `(tokens, outputs)` `out`, then `finish` on
    /// the rows of `out`, given with the index of their first token (in any order, in
    /// parallel: the bias is the finisher's).
    fn apply(&self, x: &[f32], out: &mut [f32], finish: impl Fn(&mut [f32], usize) + Sync) -> Result<()> {
        let (inputs, outputs) = (self.inputs, self.outputs);
        let tokens = x.len() / inputs;
        if x.len() != tokens * inputs || out.len() != tokens * outputs {
            return Err(format!(
                "a product of {} values by a {inputs}x{outputs} matrix into {}",
                x.len(),
                out.len()
            ));
        }
        if tokens == 0 {
            return Ok(());
        }
        let weights = Matrix::rows(&self.transposed, inputs, outputs);
        let threads = rayon::current_num_threads().max(1);
        if tokens >= MIN_ROWS_PER_TASK * threads {
            let rows_per_task = tokens.div_ceil(threads);
            return out
                .par_chunks_mut(rows_per_task * outputs)
                .zip(x.par_chunks(rows_per_task * inputs))
                .enumerate()
                .try_for_each(|(task, (out, x))| {
                    multiply(Matrix::rows(x, x.len() / inputs, inputs), weights, out, outputs)?;
                    finish(out, task * rows_per_task);
                    Ok(())
                });
        }
        // Few tokens (a query): the threads take the outputs in turns of a few tiles, read from
        // the 4-bit copy; each task writes its own block, copied into place after.
        let columns_per_task = outputs.div_ceil(TILE).div_ceil(4 * threads).max(1) * TILE;
        let x = Matrix::rows(x, tokens, inputs);
        let blocks = (0..outputs.div_ceil(columns_per_task))
            .into_par_iter()
            .map(|task| {
                let first = task * columns_per_task;
                let width = columns_per_task.min(outputs - first);
                let mut block = vec![0f32; tokens * width];
                let mut tile = vec![0f32; inputs * TILE];
                for start in (0..width).step_by(TILE) {
                    self.tiles.expand((first + start) / TILE, &mut tile)?;
                    let weights = Matrix {
                        columns: TILE.min(width - start),
                        ..Matrix::rows(&tile, inputs, TILE)
                    };
                    multiply(x, weights, &mut block[start..], width)?;
                }
                Ok((first, width, block))
            })
            .collect::<Result<Vec<_>>>()?;
        for (first, width, block) in blocks {
            for (row, values) in out.chunks_exact_mut(outputs).zip(block.chunks_exact(width)) {
                row[first..first + width].copy_from_slice(values);
            }
        }
        finish(out, 0);
        Ok(())
    }
}

struct Layer {
    /// Queries, keys and values in one product: `(hidden, 3 * hidden)`.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    up: Linear,
    down: Linear,
    output_norm: LayerNorm,
}

/// The encoder.
pub(crate) struct Bert {
    hidden: usize,
    heads: usize,
    intermediate: usize,
    /// The word embedding's rows, Q4_0 (250,000 rows: 54 MB, 384 MB in f32).
    words: Vec<u8>,
    vocab_rows: usize,
    /// Position embeddings plus the embedding of token type 0, `(positions, hidden)`.
    positions: Vec<f32>,
    max_positions: usize,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
}

fn norm(file: &ModelFile, name: &str, width: usize, eps: f32) -> Result<LayerNorm> {
    Ok(LayerNorm {
        weight: file.f32s(&format!("{name}.w"), width)?,
        bias: file.f32s(&format!("{name}.b"), width)?,
        eps,
    })
}

/// The buffers a layer writes, kept from layer to layer.
struct Scratch {
    qkv: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    up: Vec<f32>,
}

impl Bert {
    /// The encoder of `file`.
    pub(crate) fn load(file: ModelFile) -> Result<Self> {
        let h = file.header.clone();
        let (hidden, ff) = (h.hidden, h.intermediate);
        if h.type_vocab == 0 {
            return Err("the model has no token types".into());
        }
        let mut positions = file.f32s("emb.pos", h.max_positions * hidden)?;
        let types = file.f32s("emb.type", h.type_vocab * hidden)?;
        for row in positions.chunks_exact_mut(hidden) {
            for (p, t) in row.iter_mut().zip(&types) {
                *p += t;
            }
        }
        let eps = h.layer_norm_eps;
        let layers = (0..h.layers)
            .into_par_iter()
            .map(|l| {
                let name = |part: &str| format!("l{l}.{part}");
                Ok(Layer {
                    qkv: Linear::load(&file, &[&name("q"), &name("k"), &name("v")], hidden, hidden)?,
                    attention_out: Linear::load(&file, &[&name("ao")], hidden, hidden)?,
                    attention_norm: norm(&file, &name("aln"), hidden, eps)?,
                    up: Linear::load(&file, &[&name("fi")], ff, hidden)?,
                    down: Linear::load(&file, &[&name("fo")], hidden, ff)?,
                    output_norm: norm(&file, &name("oln"), hidden, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embedding_norm = norm(&file, "emb.ln", hidden, eps)?;
        let words = file.into_q4_0("emb.word", h.vocab_rows, hidden)?;
        Ok(Bert {
            hidden,
            heads: h.heads,
            intermediate: ff,
            words,
            vocab_rows: h.vocab_rows,
            positions,
            max_positions: h.max_positions,
            embedding_norm,
            layers,
        })
    }

    /// The width of the vectors.
    pub(crate) fn hidden(&self) -> usize {
        self.hidden
    }

    /// One unit-length vector per sequence of token ids (each non-empty and at most as long as
    /// the model has positions): the mean of its last hidden states, normalised.
    pub(crate) fn embed(&self, sequences: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let hidden = self.hidden;
        let lengths: Vec<usize> = sequences.iter().map(Vec::len).collect();
        let tokens: usize = lengths.iter().sum();
        let mut x = self.embeddings(sequences)?;
        let mut scratch = Scratch {
            qkv: vec![0f32; tokens * 3 * hidden],
            context: vec![0f32; tokens * hidden],
            attended: vec![0f32; tokens * hidden],
            up: vec![0f32; tokens * self.intermediate],
        };
        for layer in &self.layers {
            self.layer(layer, &mut x, &lengths, &mut scratch)?;
        }
        let mut vectors = Vec::with_capacity(sequences.len());
        let mut rows = x.chunks_exact(hidden);
        for len in lengths {
            let mut mean = vec![0f32; hidden];
            for row in rows.by_ref().take(len) {
                mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
            }
            mean.iter_mut().for_each(|m| *m /= len as f32);
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                mean.iter_mut().for_each(|v| *v /= norm);
            }
            vectors.push(mean);
        }
        Ok(vectors)
    }

    /// The word embedding of every token plus its position's, normalised, `(tokens, hidden)`.
    fn embeddings(&self, sequences: &[Vec<u32>]) -> Result<Vec<f32>> {
        let hidden = self.hidden;
        let row_bytes = hidden / Q4_BLOCK * Q4_BLOCK_BYTES;
        let total: usize = sequences.iter().map(Vec::len).sum();
        let mut x = vec![0f32; total * hidden];
        let mut rows = x.chunks_exact_mut(hidden);
        for sequence in sequences {
            if sequence.is_empty() || sequence.len() > self.max_positions {
                return Err(format!(
                    "a sequence of {} tokens (the model takes 1 to {})",
                    sequence.len(),
                    self.max_positions
                ));
            }
            for (position, &token) in sequence.iter().enumerate() {
                let token = token as usize;
                if token >= self.vocab_rows {
                    return Err(format!(
                        "token {token} is outside the vocabulary of {}",
                        self.vocab_rows
                    ));
                }
                let (Some(row), Some(blocks), Some(position)) = (
                    rows.next(),
                    self.words.get(token * row_bytes..(token + 1) * row_bytes),
                    self.positions.get(position * hidden..(position + 1) * hidden),
                ) else {
                    return Err("the embedding tables are shorter than the model says".into());
                };
                dequantize_q4_0(blocks, row);
                for (v, p) in row.iter_mut().zip(position) {
                    *v += p;
                }
                self.embedding_norm.row(row);
            }
        }
        Ok(x)
    }

    /// Self-attention of the packed texts, each attending to itself only: `qkv` holds each
    /// token's queries (scaled), keys and values; `context` gets the attended values. One task
    /// per text and head: its scores, their softmax and its share of the context.
    fn attend(&self, qkv: &[f32], lengths: &[usize], context: &mut [f32]) -> Result<()> {
        let (hidden, heads) = (self.hidden, self.heads);
        let head_dim = hidden / heads;
        let width = 3 * hidden;
        let starts: Vec<usize> = lengths
            .iter()
            .scan(0, |start, len| {
                let here = *start;
                *start += len;
                Some(here)
            })
            .collect();
        let heads_of = |text: usize, head: usize| -> Result<Vec<f32>> {
            let (start, len) = (starts[text], lengths[text]);
            let at = |part: usize| {
                qkv.get((start * width + part * hidden + head * head_dim)..)
                    .unwrap_or(&[])
            };
            let strided = |part: usize, transposed: bool| Matrix {
                data: at(part),
                rows: if transposed { head_dim } else { len },
                columns: if transposed { len } else { head_dim },
                row_stride: if transposed { 1 } else { width },
                column_stride: if transposed { width } else { 1 },
            };
            let mut scores = vec![0f32; len * len];
            multiply(strided(0, false), strided(1, true), &mut scores, len)?;
            softmax(&mut scores, len);
            let mut values = vec![0f32; len * head_dim];
            multiply(
                Matrix::rows(&scores, len, len),
                strided(2, false),
                &mut values,
                head_dim,
            )?;
            Ok(values)
        };
        let results = (0..lengths.len() * heads)
            .into_par_iter()
            .map(|task| heads_of(task / heads, task % heads))
            .collect::<Result<Vec<_>>>()?;
        for (task, values) in results.iter().enumerate() {
            let (text, head) = (task / heads, task % heads);
            let rows = context[starts[text] * hidden..].chunks_exact_mut(hidden);
            for (row, values) in rows.zip(values.chunks_exact(head_dim)) {
                row[head * head_dim..(head + 1) * head_dim].copy_from_slice(values);
            }
        }
        Ok(())
    }

    /// One layer over `x`, `(tokens, hidden)`, in place.
    fn layer(&self, layer: &Layer, x: &mut Vec<f32>, lengths: &[usize], scratch: &mut Scratch) -> Result<()> {
        let hidden = self.hidden;
        let scale = 1.0 / ((hidden / self.heads) as f32).sqrt();
        layer.qkv.apply(x, &mut scratch.qkv, |rows, _| {
            qkv_bias(rows, &layer.qkv.bias, scale)
        })?;
        self.attend(&scratch.qkv, lengths, &mut scratch.context)?;
        let residual = x.as_slice();
        layer
            .attention_out
            .apply(&scratch.context, &mut scratch.attended, |rows, first| {
                let residual = &residual[first * hidden..first * hidden + rows.len()];
                add_bias_norm(rows, &layer.attention_out.bias, residual, &layer.attention_norm)
            })?;
        // The norm's output is the residual stream from here on.
        std::mem::swap(x, &mut scratch.attended);
        layer
            .up
            .apply(x, &mut scratch.up, |rows, _| bias_gelu(rows, &layer.up.bias))?;
        let residual = x.as_slice();
        layer
            .down
            .apply(&scratch.up, &mut scratch.attended, |rows, first| {
                let residual = &residual[first * hidden..first * hidden + rows.len()];
                add_bias_norm(rows, &layer.down.bias, residual, &layer.output_norm)
            })?;
        std::mem::swap(x, &mut scratch.attended);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::tests::{Data, quantize, synthetic_file};

    const H: usize = 64;
    const HEADS: usize = 4;
    const FF: usize = 128;
    const LAYERS: usize = 2;
    const ROWS: usize = 12;
    const POSITIONS: usize = 16;

    /// Deterministic values in about -0.5..0.5.
    fn noise(seed: usize, n: usize) -> Vec<f32> {
        let mut state = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) + 1;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
            })
            .collect()
    }

    /// A small model with every tensor the encoder reads.
    fn model_file() -> ModelFile {
        let mut tensors: Vec<(String, Data)> = vec![
            (
                "emb.word".into(),
                Data::Q4(ROWS * H, quantize(&noise(1, ROWS * H), 0.07)),
            ),
            ("emb.pos".into(), Data::F32(noise(2, POSITIONS * H))),
            ("emb.type".into(), Data::F32(noise(3, 2 * H))),
            (
                "emb.ln.w".into(),
                Data::F32(noise(4, H).iter().map(|v| 1.0 + v).collect()),
            ),
            ("emb.ln.b".into(), Data::F32(noise(5, H))),
        ];
        for l in 0..LAYERS {
            let seed = 100 * (l + 1);
            for (i, (part, rows, columns)) in [
                ("q", H, H),
                ("k", H, H),
                ("v", H, H),
                ("ao", H, H),
                ("fi", FF, H),
                ("fo", H, FF),
            ]
            .into_iter()
            .enumerate()
            {
                let weights = noise(seed + i, rows * columns);
                tensors.push((
                    format!("l{l}.{part}.w"),
                    Data::Q4(rows * columns, quantize(&weights, 0.03)),
                ));
                tensors.push((format!("l{l}.{part}.b"), Data::F32(noise(seed + 10 + i, rows))));
            }
            for (i, norm) in ["aln", "oln"].into_iter().enumerate() {
                let weight = noise(seed + 20 + i, H).iter().map(|v| 1.0 + v).collect();
                tensors.push((format!("l{l}.{norm}.w"), Data::F32(weight)));
                tensors.push((format!("l{l}.{norm}.b"), Data::F32(noise(seed + 30 + i, H))));
            }
        }
        let named: Vec<(&str, Data)> = tensors
            .into_iter()
            .map(|(name, data)| (&*String::leak(name), data))
            .collect();
        let pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)];
        let dims = [H, LAYERS, HEADS, FF, ROWS, POSITIONS, 2].map(|d| d as i32);
        ModelFile::parse(synthetic_file(dims, &pieces, &named)).unwrap()
    }

    fn matrix(file: &ModelFile, name: &str, rows: usize, columns: usize) -> Vec<f64> {
        let mut values = vec![0f32; rows * columns];
        dequantize_q4_0(file.q4_0(name, rows, columns).unwrap(), &mut values);
        values.into_iter().map(f64::from).collect()
    }

    fn vector(file: &ModelFile, name: &str, n: usize) -> Vec<f64> {
        file.f32s(name, n).unwrap().into_iter().map(f64::from).collect()
    }

    /// `x W^T + b` over rows of `x`.
    fn linear(x: &[Vec<f64>], w: &[f64], b: &[f64]) -> Vec<Vec<f64>> {
        let columns = x[0].len();
        x.iter()
            .map(|row| {
                b.iter()
                    .enumerate()
                    .map(|(o, bias)| bias + (0..columns).map(|i| row[i] * w[o * columns + i]).sum::<f64>())
                    .collect()
            })
            .collect()
    }

    fn norm(x: &mut [Vec<f64>], w: &[f64], b: &[f64]) {
        for row in x {
            let mean = row.iter().sum::<f64>() / row.len() as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / row.len() as f64;
            for (i, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) / (var + 1e-12).sqrt() * w[i] + b[i];
            }
        }
    }

    /// The encoder written out in f64, one text: what [`Bert::embed`] must agree with.
    fn reference(file: &ModelFile, tokens: &[u32]) -> Vec<f32> {
        let word = matrix(file, "emb.word", ROWS, H);
        let (pos, ty) = (
            vector(file, "emb.pos", POSITIONS * H),
            vector(file, "emb.type", 2 * H),
        );
        let mut x: Vec<Vec<f64>> = tokens
            .iter()
            .enumerate()
            .map(|(p, &t)| {
                (0..H)
                    .map(|i| word[t as usize * H + i] + pos[p * H + i] + ty[i])
                    .collect()
            })
            .collect();
        norm(&mut x, &vector(file, "emb.ln.w", H), &vector(file, "emb.ln.b", H));
        let d = H / HEADS;
        for l in 0..LAYERS {
            let lin = |x: &[Vec<f64>], part: &str, rows: usize, columns: usize| {
                let w = matrix(file, &format!("l{l}.{part}.w"), rows, columns);
                linear(x, &w, &vector(file, &format!("l{l}.{part}.b"), rows))
            };
            let (q, k, v) = (lin(&x, "q", H, H), lin(&x, "k", H, H), lin(&x, "v", H, H));
            let mut context = vec![vec![0f64; H]; tokens.len()];
            for h in 0..HEADS {
                for i in 0..tokens.len() {
                    let scores: Vec<f64> = (0..tokens.len())
                        .map(|j| {
                            (0..d).map(|e| q[i][h * d + e] * k[j][h * d + e]).sum::<f64>() / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = exp.iter().sum();
                    for e in 0..d {
                        context[i][h * d + e] =
                            (0..tokens.len()).map(|j| exp[j] / sum * v[j][h * d + e]).sum();
                    }
                }
            }
            let attended = lin(&context, "ao", H, H);
            for (row, a) in x.iter_mut().zip(attended) {
                row.iter_mut().zip(a).for_each(|(v, a)| *v += a);
            }
            norm(
                &mut x,
                &vector(file, &format!("l{l}.aln.w"), H),
                &vector(file, &format!("l{l}.aln.b"), H),
            );
            let mut up = lin(&x, "fi", FF, H);
            for v in up.iter_mut().flatten() {
                *v = 0.5 * *v * (1.0 + libm::erf(*v / std::f64::consts::SQRT_2));
            }
            let down = lin(&up, "fo", H, FF);
            for (row, a) in x.iter_mut().zip(down) {
                row.iter_mut().zip(a).for_each(|(v, a)| *v += a);
            }
            norm(
                &mut x,
                &vector(file, &format!("l{l}.oln.w"), H),
                &vector(file, &format!("l{l}.oln.b"), H),
            );
        }
        let mean: Vec<f64> = (0..H)
            .map(|i| x.iter().map(|row| row[i]).sum::<f64>() / tokens.len() as f64)
            .collect();
        let length = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
        mean.iter().map(|v| (v / length) as f32).collect()
    }

    fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    #[test]
    fn the_encoder_computes_what_the_model_written_out_computes() {
        let file = model_file();
        let bert = Bert::load(model_file()).unwrap();
        let sequences = vec![
            vec![0, 5, 7, 11, 2],
            vec![0, 4, 2],
            vec![0, 9, 9, 9, 9, 9, 9, 9, 9, 10, 8, 6, 2],
        ];
        // One batch: the texts packed, each attending to itself only.
        let together = bert.embed(&sequences).unwrap();
        assert_eq!(together.len(), 3);
        for (sequence, vector) in sequences.iter().zip(&together) {
            let expected = reference(&file, sequence);
            assert!(
                largest_difference(vector, &expected) < 1e-5,
                "{vector:?}\n{expected:?}"
            );
            let alone = bert.embed(std::slice::from_ref(sequence)).unwrap();
            assert!(largest_difference(vector, &alone[0]) < 1e-6);
        }
    }

    #[test]
    fn many_tokens_and_few_take_different_paths_to_the_same_vectors() {
        let file = model_file();
        let bert = Bert::load(model_file()).unwrap();
        let sequences: Vec<Vec<u32>> = (0..6)
            .map(|i| (0..13).map(|t| ((t * 5 + i) % ROWS) as u32).collect())
            .collect();
        // Two threads: 78 tokens are split by rows over the f32 weights, 13 by columns over
        // the 4-bit tiles.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| {
            let together = bert.embed(&sequences).unwrap();
            for (sequence, vector) in sequences.iter().zip(&together) {
                assert!(largest_difference(vector, &reference(&file, sequence)) < 1e-5);
                let alone = bert.embed(std::slice::from_ref(sequence)).unwrap();
                assert!(largest_difference(vector, &alone[0]) < 1e-6);
            }
        });
    }

    #[test]
    fn sequences_the_model_cannot_take_are_errors() {
        let bert = Bert::load(model_file()).unwrap();
        assert!(bert.embed(&[vec![]]).is_err());
        assert!(bert.embed(&[vec![0; POSITIONS + 1]]).is_err());
        assert!(bert.embed(&[vec![0, ROWS as u32, 2]]).is_err());
        assert_eq!(bert.embed(&[vec![0; POSITIONS]]).unwrap()[0].len(), H);
    }

    #[test]
    fn a_model_missing_a_tensor_is_refused() {
        let mut broken = synthetic_file(
            [H, LAYERS, HEADS, FF, ROWS, POSITIONS, 2].map(|d| d as i32),
            &[("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)],
            &[("emb.pos", Data::F32(noise(2, POSITIONS * H)))],
        );
        assert!(Bert::load(ModelFile::parse(std::mem::take(&mut broken)).unwrap()).is_err());
        assert!(Bert::load(model_file()).is_ok());
    }
}
