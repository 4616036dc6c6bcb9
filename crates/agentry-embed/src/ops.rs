//! The encoder's steps between its matrix products, as candle CPU operations: each fuses the
//! bias of the product before it and runs in parallel (candle's broadcast add, GELU and
//! attention softmax ran on one thread and took a third of the time).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape};
use rayon::prelude::*;

/// The contiguous f32 values of a CPU tensor.
fn values<'a>(storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(all) = storage else {
        candle_core::bail!("expected f32 values");
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&all[start..end]),
        None => candle_core::bail!("expected contiguous values"),
    }
}

/// Rows of `values` (`width` each, `width` > 0) and the bias of their width.
fn check_rows(values: &[f32], width: usize, bias: &[f32]) -> Result<()> {
    if width == 0 || !values.len().is_multiple_of(width) || bias.len() != width {
        candle_core::bail!(
            "cannot take {} values in rows of {width} with a bias of {}",
            values.len(),
            bias.len()
        );
    }
    Ok(())
}

/// Layer normalisation of each row: mean and variance in two passes, as PyTorch does.
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    pub(crate) eps: f32,
}

impl LayerNorm {
    /// Normalises one row in place.
    pub(crate) fn row(&self, row: &mut [f32]) {
        let width = row.len() as f32;
        let mean = row.iter().sum::<f32>() / width;
        let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width;
        let scale = 1.0 / (variance + self.eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
            *v = (*v - mean) * scale * w + b;
        }
    }
}

/// `LayerNorm(x + bias + residual)`: a product's output, its bias and the residual stream.
pub(crate) struct AddBiasNorm<'a> {
    pub(crate) bias: &'a [f32],
    pub(crate) norm: &'a LayerNorm,
}

impl CustomOp2 for AddBiasNorm<'_> {
    fn name(&self) -> &'static str {
        "add-bias-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, residual) = (values(s1, l1)?, values(s2, l2)?);
        let width = self.norm.weight.len();
        check_rows(x, width, self.bias)?;
        if residual.len() != x.len() {
            candle_core::bail!("a residual of {} values for {}", residual.len(), x.len());
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(width)
            .zip(x.par_chunks(width).zip(residual.par_chunks(width)))
            .for_each(|(out, (x, r))| {
                for (((o, a), b), r) in out.iter_mut().zip(x).zip(self.bias).zip(r) {
                    *o = a + b + r;
                }
                self.norm.row(out);
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `GELU(x + bias)` with the error function, `v/2 (1 + erf(v/√2))`.
pub(crate) struct BiasGelu<'a> {
    pub(crate) bias: &'a [f32],
}

impl CustomOp1 for BiasGelu<'_> {
    fn name(&self) -> &'static str {
        "bias-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(storage, layout)?;
        let width = self.bias.len();
        check_rows(x, width, self.bias)?;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(width)
            .zip(x.par_chunks(width))
            .for_each(|(out, x)| {
                for ((o, v), b) in out.iter_mut().zip(x).zip(self.bias) {
                    let v = v + b;
                    *o = 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// The error function in f32, within 5e-7 of the exact one: the rational approximation of
/// Eigen's `generic_fast_erf_float` (also XLA's), odd numerator over even denominator in `x²`,
/// on `x` clamped to ±4 (beyond, erf is ±1 in f32). It vectorises, where libm's `erff` took
/// 29 ns a value.
#[allow(clippy::excessive_precision)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.72614225801306e-10f32;
    for c in [
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ] {
        p = p * x2 + c;
    }
    let mut q = -1.45660718464996e-05f32;
    for c in [
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    ] {
        q = q * x2 + c;
    }
    x * p / q
}

/// Self-attention of packed texts: `qkv` holds, for every token of every text one after the
/// other, its queries, keys and values (`3 x hidden`, before their bias); the result holds
/// each token's attended values, `hidden` wide. Each text attends to itself only, so no mask.
pub(crate) struct Attention<'a> {
    /// The tokens of each text, in order.
    pub(crate) lengths: &'a [usize],
    pub(crate) heads: usize,
    /// The bias of the queries, keys and values.
    pub(crate) bias: &'a [f32],
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "packed-self-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = values(storage, layout)?;
        let width = self.bias.len();
        check_rows(qkv, width, self.bias)?;
        let hidden = width / 3;
        let tokens: usize = self.lengths.iter().sum();
        if hidden * 3 != width
            || self.heads == 0
            || !hidden.is_multiple_of(self.heads)
            || qkv.len() != tokens * width
        {
            candle_core::bail!(
                "cannot attend over {} values of {tokens} tokens with {} heads",
                qkv.len(),
                self.heads
            );
        }
        let head_dim = hidden / self.heads;
        // One task per text and head; each returns its (len, head_dim) block.
        let mut tasks = Vec::with_capacity(self.lengths.len() * self.heads);
        let mut start = 0;
        for &len in self.lengths {
            for head in 0..self.heads {
                tasks.push((start, len, head));
            }
            start += len;
        }
        let blocks: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(start, len, head)| {
                let rows = &qkv[start * width..(start + len) * width];
                attend_head(rows, width, self.bias, head * head_dim, head_dim, hidden)
            })
            .collect();
        let mut out = vec![0f32; tokens * hidden];
        for (&(start, len, head), block) in tasks.iter().zip(&blocks) {
            for (t, values) in block.chunks_exact(head_dim).enumerate().take(len) {
                let at = (start + t) * hidden + head * head_dim;
                out[at..at + head_dim].copy_from_slice(values);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((tokens, hidden))))
    }
}

/// One head over one text's `rows` of queries, keys and values: `softmax(q k^T / √d) v`, the
/// head's columns starting at `column`, `(len, dim)`.
fn attend_head(
    rows: &[f32],
    width: usize,
    bias: &[f32],
    column: usize,
    dim: usize,
    hidden: usize,
) -> Vec<f32> {
    let len = rows.len() / width;
    let scale = 1.0 / (dim as f32).sqrt();
    let part = |offset: usize| {
        (
            offset + column..offset + column + dim,
            &bias[offset + column..offset + column + dim],
        )
    };
    let (q_cols, q_bias) = part(0);
    let (k_cols, k_bias) = part(hidden);
    let (v_cols, v_bias) = part(2 * hidden);
    // Queries and values by token, keys by dimension: a query's scores are then `dim` sums of
    // whole rows, which vectorise (dot products would each end in a horizontal sum).
    let mut q = Vec::with_capacity(len * dim);
    let mut v = Vec::with_capacity(len * dim);
    let mut keys = vec![0f32; dim * len];
    for (t, row) in rows.chunks_exact(width).enumerate() {
        q.extend(
            row[q_cols.clone()]
                .iter()
                .zip(q_bias)
                .map(|(x, b)| (x + b) * scale),
        );
        v.extend(row[v_cols.clone()].iter().zip(v_bias).map(|(x, b)| x + b));
        for (d, (x, b)) in row[k_cols.clone()].iter().zip(k_bias).enumerate() {
            keys[d * len + t] = x + b;
        }
    }
    let mut out = vec![0f32; len * dim];
    let mut weights = vec![0f32; len];
    // The loops below, compiled for the CPU's vector instructions (AVX2 and FMA where present).
    for (query, out) in q.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        attend_query(query, &keys, &v, &mut weights, out);
    }
    out
}

/// One query's attended values into `out`; `weights` is scratch of the text's length.
fn attend_query(query: &[f32], keys: &[f32], values: &[f32], weights: &mut [f32], out: &mut [f32]) {
    let len = weights.len();
    weights.iter_mut().for_each(|w| *w = 0.0);
    for (factor, keys) in query.iter().zip(keys.chunks_exact(len)) {
        for (w, k) in weights.iter_mut().zip(keys) {
            *w += factor * k;
        }
    }
    let max = weights.iter().fold(f32::NEG_INFINITY, |m, w| m.max(*w));
    weights.iter_mut().for_each(|w| *w = (*w - max).exp());
    let sum: f32 = weights.iter().sum();
    out.iter_mut().for_each(|o| *o = 0.0);
    for (w, value) in weights.iter().zip(values.chunks_exact(out.len())) {
        for (o, x) in out.iter_mut().zip(value) {
            *o += w * x;
        }
    }
    let inverse = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= inverse);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_is_within_5e_7_of_the_exact_function() {
        let mut largest = 0f64;
        for i in -800_000..=800_000 {
            let x = i as f32 / 100_000.0;
            let error = (f64::from(erf(x)) - libm::erf(f64::from(x))).abs();
            largest = largest.max(error);
        }
        assert!(largest < 5e-7, "largest error {largest}");
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
    }
}
