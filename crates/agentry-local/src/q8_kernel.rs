//! Dot products of Q8_0 weight rows with Q8_0 activations, several tokens per weight row.
//!
//! candle's Q8_0 product calls one dot product per (row, token) pair, converts both f16 block
//! scales through a function call per block and keeps one accumulator, so on the 0.5B (stored as
//! Q8_0) a generated token ran at 56 % of llama.cpp's rate and a prompt at a quarter of it,
//! with no gain from the tokens sharing each weight. Here a weight block is loaded and its sign
//! split once for up to [`TOKENS`] tokens, scales are converted in line, and the activations'
//! scales are kept as f32.

#![allow(unsafe_code)]

use half::f16;

/// Tokens multiplied by one pass over a weight row.
pub(crate) const TOKENS: usize = 4;

/// Values per block.
pub(crate) const BLOCK: usize = 32;

/// A GGUF Q8_0 block: 32 signed bytes and their f16 scale, exactly as stored in the file.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Q8Block {
    scale: f16,
    values: [i8; BLOCK],
}

const _: () = assert!(std::mem::size_of::<Q8Block>() == 34 && std::mem::align_of::<Q8Block>() == 2);

/// The Q8_0 blocks of a tensor's storage, or `None` when the bytes are not whole, aligned blocks.
pub(crate) fn blocks(data: &[u8]) -> Option<&[Q8Block]> {
    let size = std::mem::size_of::<Q8Block>();
    if !data.len().is_multiple_of(size)
        || !(data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<Q8Block>())
    {
        return None;
    }
    // SAFETY: `Q8Block` is `repr(C)` with no padding (34 bytes, checked at compile time) and
    // every bit pattern of its fields is valid; length and alignment are checked above, and
    // the result borrows `data`.
    Some(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<Q8Block>(), data.len() / size) })
}

/// One token's activations quantized to Q8_0 as ggml does it, with the scales as f32.
pub(crate) struct Q8Activations {
    values: Vec<[i8; BLOCK]>,
    scales: Vec<f32>,
}

impl Q8Activations {
    /// Quantizes `x`; a last partial block is padded with zeros.
    pub(crate) fn new(x: &[f32]) -> Self {
        let mut values = Vec::with_capacity(x.len().div_ceil(BLOCK));
        let mut scales = Vec::with_capacity(values.capacity());
        for chunk in x.chunks(BLOCK) {
            let largest = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = largest / 127.0;
            let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
            let mut block = [0i8; BLOCK];
            for (q, v) in block.iter_mut().zip(chunk) {
                *q = (v * inverse).round() as i8;
            }
            values.push(block);
            // Rounded through f16 as the stored block would be, so products match ggml's.
            scales.push(f16::from_f32(scale).to_f32());
        }
        Q8Activations { values, scales }
    }

    /// Blocks held.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// Whether this CPU runs the vector path; checked once.
fn vector_path() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `row · x` for each of `R` rows and `N` tokens, `[row][token]`. Every row and activation must
/// have the same number of blocks; a tile where they differ gives zeros (callers check the
/// shapes first).
pub(crate) fn tile<const R: usize, const N: usize>(
    rows: [&[Q8Block]; R],
    xs: [&Q8Activations; N],
) -> [[f32; N]; R] {
    let blocks = rows.first().map_or(0, |row| row.len());
    if rows.iter().any(|row| row.len() != blocks) || xs.iter().any(|x| x.len() != blocks) {
        return [[0.0; N]; R];
    }
    #[cfg(target_arch = "x86_64")]
    if vector_path() {
        // SAFETY: the CPU features were detected above, and every row and activation has
        // `blocks` blocks (checked above; one scale per activation block by construction).
        return unsafe { avx2::tile(rows, xs) };
    }
    rows.map(|row| {
        xs.map(|x| {
            row.iter()
                .zip(x.values.iter().zip(&x.scales))
                .map(|(w, (values, scale))| {
                    let sum: i32 = w
                        .values
                        .iter()
                        .zip(values)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum();
                    w.scale.to_f32() * scale * sum as f32
                })
                .sum()
        })
    })
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Q8Activations, Q8Block};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU has AVX2, FMA and F16C; every activation has as many blocks and scales as every
    /// row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile<const R: usize, const N: usize>(
        rows: [&[Q8Block]; R],
        xs: [&Q8Activations; N],
    ) -> [[f32; N]; R] {
        let ones = _mm256_set1_epi16(1);
        let mut sums = [[_mm256_setzero_ps(); N]; R];
        let blocks = rows.first().map_or(0, |row| row.len());
        for j in 0..blocks {
            for (row, sums) in rows.iter().zip(sums.iter_mut()) {
                // SAFETY: `j < blocks`, the length of every row (caller).
                let block = unsafe { row.get_unchecked(j) };
                // SAFETY: 32 bytes read from a 32-byte array.
                let weights = unsafe { _mm256_loadu_si256(block.values.as_ptr().cast::<__m256i>()) };
                let magnitudes = _mm256_sign_epi8(weights, weights);
                let weight_scale =
                    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(block.scale.to_bits()))));
                for (sum, x) in sums.iter_mut().zip(xs) {
                    // SAFETY: `j < blocks`, the length of `values` and `scales` (caller).
                    let (values, scale) = unsafe { (x.values.get_unchecked(j), *x.scales.get_unchecked(j)) };
                    // SAFETY: 32 bytes read from a 32-byte array.
                    let values = unsafe { _mm256_loadu_si256(values.as_ptr().cast::<__m256i>()) };
                    // |w| times x carrying w's sign: unsigned by signed bytes, as the instruction needs.
                    let signed = _mm256_sign_epi8(values, weights);
                    let pairs = _mm256_maddubs_epi16(magnitudes, signed);
                    let products = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                    *sum = _mm256_fmadd_ps(_mm256_set1_ps(weight_scale * scale), products, *sum);
                }
            }
        }
        sums.map(|sums| sums.map(|sum| horizontal_sum(sum)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn horizontal_sum(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(values: &[f32]) -> Vec<Q8Block> {
        let quantized = Q8Activations::new(values);
        quantized
            .values
            .iter()
            .zip(&quantized.scales)
            .map(|(values, scale)| Q8Block {
                scale: f16::from_f32(*scale),
                values: *values,
            })
            .collect()
    }

    #[test]
    fn a_tile_of_rows_and_tokens_matches_the_plain_sum() {
        let weights: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let row = row(&weights);
        let tokens: Vec<Q8Activations> = (0..TOKENS)
            .map(|t| {
                Q8Activations::new(
                    &(0..256)
                        .map(|i| ((i * 13 + t * 7) % 17) as f32 - 8.0)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let [ours, again] = tile([&row, &row], [&tokens[0], &tokens[1], &tokens[2], &tokens[3]]);
        assert_eq!(ours, again);
        for (t, value) in ours.iter().enumerate() {
            let exact: f32 = (0..256)
                .map(|i| weights[i] * (((i * 13 + t * 7) % 17) as f32 - 8.0))
                .sum();
            assert!(
                (value - exact).abs() <= 0.02 * exact.abs().max(10.0),
                "token {t}: {value} against {exact}"
            );
        }
        assert_eq!(tile([&row], [&tokens[2]])[0][0], ours[2]);
    }
}
