//! The BERT encoder of multilingual-e5-small over the file's 4-bit weights, with mean pooling
//! and L2 normalisation.
//!
//! The weights stay in their Q4_0 blocks, in the file's own bytes (72 MB for the whole model); a
//! matrix is expanded to f32 just before its product and dropped after it, and the word
//! embedding only for the rows of the tokens being run. The products, the attention and the
//! norms then run in f32, so the vectors are those of the f32 model that the 4-bit weights
//! describe. (candle's quantized product, `QMatMul`, rounds the activations to 8 bits: its
//! vectors were 1e-3 off the f32 ones, and it ran at half the speed.)
//!
//! The texts of a batch are packed one after the other, without padding: the matrix products
//! run on all their tokens at once, the attention text by text. This is what padding and an
//! attention mask compute, without the padded positions.

use std::ops::Range;

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use crate::file::{ModelFile, Q4_BLOCK, Q4_BLOCK_BYTES, dequantize_q4_0};
use crate::ops::{AddBiasNorm, BiasGelu, LayerNorm, QkvBias, Softmax};

type Result<T> = candle_core::Result<T>;

/// A `(rows, columns)` weight matrix in Q4_0 blocks (one or more matrices of the file stacked)
/// and its bias: `y = x W^T + b`.
struct Linear {
    blocks: Vec<Range<usize>>,
    rows: usize,
    columns: usize,
    bias: Vec<f32>,
}

impl Linear {
    fn load(
        file: &ModelFile,
        names: &[&str],
        rows: usize,
        columns: usize,
    ) -> std::result::Result<Self, String> {
        let mut blocks = Vec::with_capacity(names.len());
        let mut bias = Vec::with_capacity(names.len() * rows);
        for name in names {
            blocks.push(file.q4_0_range(&format!("{name}.w"), rows, columns)?);
            bias.extend(file.f32s(&format!("{name}.b"), rows)?);
        }
        Ok(Linear {
            blocks,
            rows: rows * names.len(),
            columns,
            bias,
        })
    }

    /// The weights as f32, `(rows, columns)`.
    fn weights(&self, data: &[u8]) -> Result<Tensor> {
        const ROWS_PER_TASK: usize = 64;
        let mut values = vec![0f32; self.rows * self.columns];
        let row_bytes = self.columns / Q4_BLOCK * Q4_BLOCK_BYTES;
        let mut out = values.as_mut_slice();
        for range in &self.blocks {
            let Some(blocks) = data.get(range.clone()) else {
                candle_core::bail!("the weights lie outside the file");
            };
            let (here, rest) = out.split_at_mut((blocks.len() / Q4_BLOCK_BYTES * Q4_BLOCK).min(out.len()));
            here.par_chunks_mut(ROWS_PER_TASK * self.columns)
                .zip(blocks.par_chunks(ROWS_PER_TASK * row_bytes))
                .for_each(|(out, blocks)| dequantize_q4_0(blocks, out));
            out = rest;
        }
        Tensor::from_vec(values, (self.rows, self.columns), &Device::Cpu)
    }

    /// `x W^T`, `(tokens, columns)` to `(tokens, rows)`: the bias is left to the next step.
    fn product(&self, data: &[u8], x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.weights(data)?.t()?)
    }
}

struct Layer {
    /// Queries, keys and values in one product: `(3 * hidden, hidden)`.
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
    /// The model file's bytes, which hold the weights.
    data: Vec<u8>,
    /// The word embedding's rows, Q4_0.
    words: Range<usize>,
    vocab_rows: usize,
    /// Position embeddings plus the embedding of token type 0, `(positions, hidden)`.
    positions: Vec<f32>,
    max_positions: usize,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
}

fn norm(file: &ModelFile, name: &str, width: usize, eps: f32) -> std::result::Result<LayerNorm, String> {
    Ok(LayerNorm {
        weight: file.f32s(&format!("{name}.w"), width)?,
        bias: file.f32s(&format!("{name}.b"), width)?,
        eps,
    })
}

impl Bert {
    /// The encoder of `file`, which keeps its bytes.
    pub(crate) fn load(file: ModelFile) -> std::result::Result<Self, String> {
        let h = file.header.clone();
        let (hidden, ff) = (h.hidden, h.intermediate);
        if h.type_vocab == 0 {
            return Err("the model has no token types".into());
        }
        let words = file.q4_0_range("emb.word", h.vocab_rows, hidden)?;
        let mut positions = file.f32s("emb.pos", h.max_positions * hidden)?;
        let types = file.f32s("emb.type", h.type_vocab * hidden)?;
        for row in positions.chunks_exact_mut(hidden) {
            for (p, t) in row.iter_mut().zip(&types) {
                *p += t;
            }
        }
        let eps = h.layer_norm_eps;
        let mut layers = Vec::with_capacity(h.layers);
        for l in 0..h.layers {
            let name = |part: &str| format!("l{l}.{part}");
            layers.push(Layer {
                qkv: Linear::load(&file, &[&name("q"), &name("k"), &name("v")], hidden, hidden)?,
                attention_out: Linear::load(&file, &[&name("ao")], hidden, hidden)?,
                attention_norm: norm(&file, &name("aln"), hidden, eps)?,
                up: Linear::load(&file, &[&name("fi")], ff, hidden)?,
                down: Linear::load(&file, &[&name("fo")], hidden, ff)?,
                output_norm: norm(&file, &name("oln"), hidden, eps)?,
            });
        }
        let embedding_norm = norm(&file, "emb.ln", hidden, eps)?;
        Ok(Bert {
            hidden,
            heads: h.heads,
            data: file.into_data(),
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
        let lengths: Vec<usize> = sequences.iter().map(Vec::len).collect();
        let mut x = self.embeddings(sequences)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &lengths)?;
        }
        let mut vectors = Vec::with_capacity(sequences.len());
        let mut start = 0;
        for len in lengths {
            let mut mean = x.narrow(0, start, len)?.mean(0)?.to_vec1::<f32>()?;
            start += len;
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                mean.iter_mut().for_each(|v| *v /= norm);
            }
            vectors.push(mean);
        }
        Ok(vectors)
    }

    /// The word embedding of every token plus its position's, normalised, `(tokens, hidden)`.
    fn embeddings(&self, sequences: &[Vec<u32>]) -> Result<Tensor> {
        let hidden = self.hidden;
        let row_bytes = hidden / Q4_BLOCK * Q4_BLOCK_BYTES;
        let Some(words) = self.data.get(self.words.clone()) else {
            candle_core::bail!("the word embedding lies outside the file");
        };
        let total: usize = sequences.iter().map(Vec::len).sum();
        let mut x = vec![0f32; total * hidden];
        let mut rows = x.chunks_exact_mut(hidden);
        for sequence in sequences {
            if sequence.is_empty() || sequence.len() > self.max_positions {
                candle_core::bail!(
                    "a sequence of {} tokens (the model takes 1 to {})",
                    sequence.len(),
                    self.max_positions
                );
            }
            for (position, &token) in sequence.iter().enumerate() {
                let token = token as usize;
                if token >= self.vocab_rows {
                    candle_core::bail!("token {token} is outside the vocabulary of {}", self.vocab_rows);
                }
                let (Some(row), Some(blocks), Some(position)) = (
                    rows.next(),
                    words.get(token * row_bytes..(token + 1) * row_bytes),
                    self.positions.get(position * hidden..(position + 1) * hidden),
                ) else {
                    candle_core::bail!("the embedding tables are shorter than the model says");
                };
                dequantize_q4_0(blocks, row);
                for (v, p) in row.iter_mut().zip(position) {
                    *v += p;
                }
                self.embedding_norm.row(row);
            }
        }
        Tensor::from_vec(x, (total, hidden), &Device::Cpu)
    }

    /// Self-attention of the packed texts, each attending to itself only: `qkv` holds each
    /// token's queries, keys and values (before their bias); the result, its attended values.
    /// The products run per text over all heads at once (a scalar loop per head took twice as
    /// long as these, which candle's matrix multiplication vectorises).
    fn attend(&self, qkv: &Tensor, lengths: &[usize], bias: &[f32]) -> Result<Tensor> {
        let head_dim = self.hidden / self.heads;
        let qkv = qkv.apply_op1_no_bwd(&QkvBias {
            bias,
            scale: 1.0 / (head_dim as f32).sqrt(),
        })?;
        let mut contexts = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &len in lengths {
            // (len, 3, heads, head_dim) -> (3, heads, len, head_dim)
            let text = qkv
                .narrow(0, start, len)?
                .reshape((len, 3, self.heads, head_dim))?
                .permute((1, 2, 0, 3))?
                .contiguous()?;
            start += len;
            let (q, k, v) = (text.get(0)?, text.get(1)?, text.get(2)?);
            let weights = q.matmul(&k.t()?)?.apply_op1_no_bwd(&Softmax)?;
            contexts.push(weights.matmul(&v)?.transpose(0, 1)?.reshape((len, self.hidden))?);
        }
        Tensor::cat(&contexts, 0)
    }

    fn layer(&self, layer: &Layer, x: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let data = self.data.as_slice();
        let context = self.attend(&layer.qkv.product(data, x)?, lengths, &layer.qkv.bias)?;
        let attended = layer.attention_out.product(data, &context)?;
        let x = attended.apply_op2_no_bwd(
            x,
            &AddBiasNorm {
                bias: &layer.attention_out.bias,
                norm: &layer.attention_norm,
            },
        )?;
        let up = layer
            .up
            .product(data, &x)?
            .apply_op1_no_bwd(&BiasGelu { bias: &layer.up.bias })?;
        layer.down.product(data, &up)?.apply_op2_no_bwd(
            &x,
            &AddBiasNorm {
                bias: &layer.down.bias,
                norm: &layer.output_norm,
            },
        )
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
