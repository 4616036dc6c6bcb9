//! The encoder's steps between its matrix products, on rows of f32 values in place: each fuses
//! the bias of the product before it, and runs on the rows a task has just computed.

/// Layer normalisation of each row: mean and variance in two passes, as PyTorch does.
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    pub(crate) eps: f32,
}

impl LayerNorm {
    /// Normalises one row in place.
    #[inline(always)]
    pub(crate) fn row(&self, row: &mut [f32]) {
        let width = row.len() as f32;
        let mean = sum_of(row, |v| v) / width;
        let variance = sum_of(row, |v| (v - mean) * (v - mean)) / width;
        let scale = 1.0 / (variance + self.eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
            *v = (*v - mean) * scale * w + b;
        }
    }
}

/// Runs `f` compiled for AVX2 where the CPU has it (pulp checks, once), else as it is: the
/// crate is built for baseline x86-64, whose SSE2 loops took twice as long. Everything `f`
/// calls must be inlined into it for the wider instructions to apply. No FMA is used unless
/// asked for, so the results are the same bits either way.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        return simd.vectorize(f);
    }
    f()
}

/// `rows = LayerNorm(rows + bias + residual)`: a product's output, its bias and the residual
/// stream, row by row (`residual` as long as `rows`).
pub(crate) fn add_bias_norm(rows: &mut [f32], bias: &[f32], residual: &[f32], norm: &LayerNorm) {
    vectorized(
        #[inline(always)]
        || {
            let width = bias.len();
            for (row, residual) in rows.chunks_exact_mut(width).zip(residual.chunks_exact(width)) {
                for ((v, b), r) in row.iter_mut().zip(bias).zip(residual) {
                    *v += b + r;
                }
                norm.row(row);
            }
        },
    )
}

/// `rows = GELU(rows + bias)` with the error function, `v/2 (1 + erf(v/√2))`.
pub(crate) fn bias_gelu(rows: &mut [f32], bias: &[f32]) {
    vectorized(
        #[inline(always)]
        || {
            for row in rows.chunks_exact_mut(bias.len()) {
                for (v, b) in row.iter_mut().zip(bias) {
                    let x = *v + b;
                    *v = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
                }
            }
        },
    )
}

/// `rows = rows + bias`, the query columns (the first third) also scaled by `scale`.
pub(crate) fn qkv_bias(rows: &mut [f32], bias: &[f32], scale: f32) {
    vectorized(
        #[inline(always)]
        || {
            let (q_bias, kv_bias) = bias.split_at(bias.len() / 3);
            for row in rows.chunks_exact_mut(bias.len()) {
                let (q, kv) = row.split_at_mut(q_bias.len());
                for (v, b) in q.iter_mut().zip(q_bias) {
                    *v = (*v + b) * scale;
                }
                for (v, b) in kv.iter_mut().zip(kv_bias) {
                    *v += b;
                }
            }
        },
    )
}

/// Softmax of each row of `width` values, in place.
pub(crate) fn softmax(rows: &mut [f32], width: usize) {
    if width == 0 {
        return;
    }
    vectorized(
        #[inline(always)]
        || {
            for row in rows.chunks_exact_mut(width) {
                let max = max_of(row);
                for v in row.iter_mut() {
                    *v = exp(*v - max);
                }
                let inverse = 1.0 / sum_of(row, |v| v);
                row.iter_mut().for_each(|v| *v *= inverse);
            }
        },
    )
}

/// The largest of `values` (-inf for none), in eight running maxima.
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            // Not f32::max, whose NaN rule keeps the compiler from vectorising.
            *lane = if *v > *lane { *v } else { *lane };
        }
    }
    lanes
        .iter()
        .chain(chunks.remainder())
        .fold(f32::NEG_INFINITY, |m, v| if *v > m { *v } else { m })
}

/// The sum of `f` over `values` in eight running sums, which vectorise (a single running sum
/// cannot be reordered by the compiler).
#[inline(always)]
pub(crate) fn sum_of(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += f(*v);
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().map(|v| f(*v)).sum::<f32>()
}

/// `e^x` in f32, within 2e-7 relative of the exact value for x in -87..88 (0 below, as f32's
/// normal range ends there): Cephes' `expf`, `2^n e^r` with `|r| <= ln 2 / 2` and a degree-6
/// polynomial, written with no call and no branch so that a loop of it vectorises (std's
/// `exp` is a libm call per value, which took a fifth of the attention's time).
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to an integer, which then sits in the low bits of the sum.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * 0.693_359_375 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_15e-4f32;
    for c in [
        1.398_199_95e-3,
        8.333_451_9e-3,
        4.166_579_59e-2,
        1.666_666_55e-1,
        5.000_000_12e-1,
    ] {
        p = p * r + c;
    }
    let e = p * r * r + r + 1.0;
    let exponent = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23;
    e * f32::from_bits(exponent)
}

/// The error function in f32, within 5e-7 of the exact one: the rational approximation of
/// Eigen's `generic_fast_erf_float` (also XLA's), odd numerator over even denominator in `x²`,
/// on `x` clamped to ±4 (beyond, erf is ±1 in f32). It vectorises, where libm's `erff` took
/// 29 ns a value.
#[allow(clippy::excessive_precision)]
#[inline(always)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_2e_7_of_the_exact_function() {
        let mut largest = 0f64;
        for i in -870_000..=880_000 {
            let x = i as f32 / 10_000.0;
            let exact = f64::from(x).exp();
            largest = largest.max((f64::from(exp(x)) - exact).abs() / exact);
        }
        assert!(largest < 2e-7, "largest relative error {largest}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), exp(-87.0));
        assert!(exp(-87.0) < 2e-38);
    }

    #[test]
    fn softmax_and_sum_agree_with_the_plain_ones() {
        let mut row: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let max = row.iter().cloned().fold(f32::MIN, f32::max);
        let plain: Vec<f64> = row.iter().map(|v| f64::from(v - max).exp()).collect();
        let total: f64 = plain.iter().sum();
        assert!(
            (f64::from(sum_of(&row, |v| v)) - row.iter().map(|v| f64::from(*v)).sum::<f64>()).abs() < 1e-4
        );
        softmax(&mut row, 37);
        for (v, p) in row.iter().zip(&plain) {
            assert!((f64::from(*v) - p / total).abs() < 1e-7);
        }
    }

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
