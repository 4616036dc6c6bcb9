//! The encoder's steps between its matrix products, as candle CPU operations: each fuses the
//! bias of the product before it and runs in parallel (candle's broadcast add and GELU ran on
//! one thread and, with its softmax, took a third of the time).

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

/// `qkv + bias`, the query columns (the first third) also scaled by `scale`.
pub(crate) struct QkvBias<'a> {
    pub(crate) bias: &'a [f32],
    pub(crate) scale: f32,
}

impl CustomOp1 for QkvBias<'_> {
    fn name(&self) -> &'static str {
        "qkv-bias"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(storage, layout)?;
        let width = self.bias.len();
        check_rows(x, width, self.bias)?;
        let queries = width / 3;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(width)
            .zip(x.par_chunks(width))
            .for_each(|(out, x)| {
                for (i, ((o, v), b)) in out.iter_mut().zip(x).zip(self.bias).enumerate() {
                    *o = if i < queries { (v + b) * self.scale } else { v + b };
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// Softmax over the last dimension, row by row in parallel.
pub(crate) struct Softmax;

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax-rows"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = values(storage, layout)?;
        let width = layout.shape().dims().last().copied().unwrap_or(0);
        if width == 0 || !x.len().is_multiple_of(width) {
            candle_core::bail!("cannot take rows of {width} from {} values", x.len());
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(width)
            .zip(x.par_chunks(width))
            .for_each(|(out, x)| {
                let max = x.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
                let mut sum = 0f32;
                for (o, v) in out.iter_mut().zip(x) {
                    *o = (v - max).exp();
                    sum += *o;
                }
                let inverse = 1.0 / sum;
                out.iter_mut().for_each(|o| *o *= inverse);
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
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
