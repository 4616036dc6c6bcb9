//! A quantized linear layer that multiplies one token's activations by the weights row by row,
//! straight from the GGUF blocks.
//!
//! candle repacks Q4_K weights into 16-row tiles with f32 scales for its matrix products. That
//! wins when many tokens share each weight (a prompt), but a generated token reads every weight
//! once, from memory rather than cache, and the tiles are a third larger than the blocks: on the
//! 1.5B's feed-forward matrices the row-by-row dot products took 0.69 ms a matrix against
//! 1.10 ms (one thread, weights not in cache; `examples/gemv_probe.rs`).

use candle_core::quantized::k_quants::{BlockQ4K, BlockQ5K, BlockQ6K, GgmlType};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Module, Result, Tensor};
use rayon::prelude::*;

use crate::q8_kernel::{self, Q8Activations, Q8Block};

/// Rows computed by one task: few enough tasks that scheduling costs nothing next to the work.
const ROWS_PER_TASK: usize = 256;

/// `y = x W^T` over quantized weights.
pub(crate) struct QuantLinear {
    matmul: QMatMul,
}

impl QuantLinear {
    pub(crate) fn new(weights: QTensor) -> Result<Self> {
        Ok(QuantLinear {
            matmul: QMatMul::from_qtensor(weights)?,
        })
    }

    /// `(.., k)` activations to `(.., rows)`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match &self.matmul {
            QMatMul::QTensor(weights) if weights.dtype() == GgmlDType::Q8_0 => {
                let (rows, out) = q8_matmul(weights, x)?;
                let mut dims = x.dims().to_vec();
                if let Some(last) = dims.last_mut() {
                    *last = rows;
                }
                Tensor::from_vec(out, dims, x.device())
            }
            QMatMul::QTensor(weights) if x.elem_count() == x.dim(candle_core::D::Minus1)? => {
                let rows = match weights.dtype() {
                    GgmlDType::Q4K => gemv::<BlockQ4K>(weights, x)?,
                    GgmlDType::Q5K => gemv::<BlockQ5K>(weights, x)?,
                    GgmlDType::Q6K => gemv::<BlockQ6K>(weights, x)?,
                    _ => return self.matmul.forward(x),
                };
                let mut dims = x.dims().to_vec();
                if let Some(last) = dims.last_mut() {
                    *last = rows.len();
                }
                Tensor::from_vec(rows, dims, x.device())
            }
            _ => self.matmul.forward(x),
        }
    }
}

/// One row of activations times every row of `weights`.
fn gemv<T: GgmlType>(weights: &QTensor, x: &Tensor) -> Result<Vec<f32>> {
    let (rows, k) = weights.shape().dims2()?;
    let x = x
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    if x.len() != k || !k.is_multiple_of(T::BLCK_SIZE) || !k.is_multiple_of(T::VecDotType::BLCK_SIZE) {
        candle_core::bail!("cannot multiply {} values by rows of {k}", x.len());
    }
    let data = weights.data()?;
    let blocks = blocks::<T>(&data)?;
    let per_row = k / T::BLCK_SIZE;
    if blocks.len() != rows * per_row {
        candle_core::bail!("{} blocks for a {rows}x{k} matrix", blocks.len());
    }
    let mut quantized = vec![T::VecDotType::zeros(); k / T::VecDotType::BLCK_SIZE];
    T::VecDotType::from_float(&x, &mut quantized);
    let mut out = vec![0f32; rows];
    out.par_chunks_mut(ROWS_PER_TASK)
        .zip(blocks.par_chunks(ROWS_PER_TASK * per_row))
        .for_each(|(out, blocks)| {
            for (y, row) in out.iter_mut().zip(blocks.chunks_exact(per_row)) {
                *y = T::vec_dot(k, row, &quantized);
            }
        });
    Ok(out)
}

/// Every token of `x` times every row of Q8_0 `weights`: the row count and the products,
/// token by token. Tasks take a band of rows and walk the tokens [`q8_kernel::TOKENS`] at a
/// time, so the band's weights stay in cache while every token passes over them.
fn q8_matmul(weights: &QTensor, x: &Tensor) -> Result<(usize, Vec<f32>)> {
    /// Rows per task when many tokens share them: 64 rows of the 0.5B are 61 KB.
    const BAND: usize = 64;
    let (rows, k) = weights.shape().dims2()?;
    let x = x
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    if k == 0 || !x.len().is_multiple_of(k) || !k.is_multiple_of(q8_kernel::BLOCK) {
        candle_core::bail!("cannot multiply {} values by rows of {k}", x.len());
    }
    let data = weights.data()?;
    let Some(blocks) = q8_kernel::blocks(&data) else {
        candle_core::bail!("the weights are not whole, aligned Q8_0 blocks");
    };
    let per_row = k / q8_kernel::BLOCK;
    if blocks.len() != rows * per_row {
        candle_core::bail!("{} blocks for a {rows}x{k} matrix", blocks.len());
    }
    let tokens: Vec<Q8Activations> = x.chunks_exact(k).map(Q8Activations::new).collect();
    let band = if tokens.len() == 1 { ROWS_PER_TASK } else { BAND };
    // Computed row-major (row, token) per band, then laid out token by token.
    let mut by_row = vec![0f32; rows * tokens.len()];
    by_row
        .par_chunks_mut(band * tokens.len())
        .zip(blocks.par_chunks(band * per_row))
        .for_each(|(out, blocks)| match tokens.len() {
            // One token reads each weight once: tiles of two or four rows measured slower.
            1 => band_products::<1, 1>(blocks, per_row, &tokens, out),
            _ => band_products::<2, { q8_kernel::TOKENS }>(blocks, per_row, &tokens, out),
        });
    if tokens.len() == 1 {
        return Ok((rows, by_row));
    }
    let mut by_token = vec![0f32; rows * tokens.len()];
    for (r, products) in by_row.chunks_exact(tokens.len()).enumerate() {
        for (t, value) in products.iter().enumerate() {
            by_token[t * rows + r] = *value;
        }
    }
    Ok((rows, by_token))
}

/// A band of weight rows times every token into `out`, `(row, token)`, in tiles of `R` rows by
/// `N` tokens and single rows and tokens for what is left.
fn band_products<const R: usize, const N: usize>(
    blocks: &[Q8Block],
    per_row: usize,
    tokens: &[Q8Activations],
    out: &mut [f32],
) {
    let mut first = 0;
    let mut groups = tokens.chunks_exact(N);
    for group in groups.by_ref() {
        let group: [&Q8Activations; N] = std::array::from_fn(|i| &group[i]);
        rows_times::<R, N>(blocks, per_row, group, first, tokens.len(), out);
        first += N;
    }
    for token in groups.remainder() {
        rows_times::<R, 1>(blocks, per_row, [token], first, tokens.len(), out);
        first += 1;
    }
}

/// Every row of `blocks` times the `N` tokens of `group`, written at `first` in rows of `stride`.
fn rows_times<const R: usize, const N: usize>(
    blocks: &[Q8Block],
    per_row: usize,
    group: [&Q8Activations; N],
    first: usize,
    stride: usize,
    out: &mut [f32],
) {
    let mut write = |row: usize, products: &[f32; N]| {
        if let Some(place) = out.get_mut(row * stride + first..row * stride + first + N) {
            place.copy_from_slice(products);
        }
    };
    let mut tiles = blocks.chunks_exact(R * per_row);
    let mut row = 0;
    for tile in tiles.by_ref() {
        let rows: [&[Q8Block]; R] = std::array::from_fn(|i| &tile[i * per_row..(i + 1) * per_row]);
        for products in q8_kernel::tile(rows, group) {
            write(row, &products);
            row += 1;
        }
    }
    for single in tiles.remainder().chunks_exact(per_row) {
        write(row, &q8_kernel::tile([single], group)[0]);
        row += 1;
    }
}

/// The blocks of a quantized tensor's storage.
#[allow(unsafe_code)]
fn blocks<T: GgmlType>(data: &[u8]) -> Result<&[T]> {
    let size = std::mem::size_of::<T>();
    if size == 0
        || !data.len().is_multiple_of(size)
        || !(data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        candle_core::bail!("the weights are not whole, aligned {:?} blocks", T::DTYPE);
    }
    // SAFETY: `data` is the CPU storage of a QTensor of dtype `T::DTYPE`, which candle keeps
    // as a `Vec<T>` of these plain `repr(C)` blocks (integers and f16 only, every bit pattern
    // valid); the length and alignment are checked above and the borrow keeps it alive.
    Ok(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<T>(), data.len() / size) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The largest difference between two tensors of one shape.
    fn max_difference(a: Tensor, b: Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn one_token_row_by_row_matches_candles_product() {
        let device = Device::Cpu;
        let values: Vec<f32> = (0..512 * 256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let weights = Tensor::from_vec(values, (512, 256), &device).unwrap();
        let x: Vec<f32> = (0..256).map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0).collect();
        let x = Tensor::from_vec(x, (1, 1, 256), &device).unwrap();
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0] {
            let quantized = QTensor::quantize(&weights, dtype).unwrap();
            let reference = QMatMul::from_qtensor(QTensor::quantize(&weights, dtype).unwrap())
                .unwrap()
                .forward(&x)
                .unwrap();
            let ours = QuantLinear::new(quantized).unwrap().forward(&x).unwrap();
            assert_eq!(ours.dims(), &[1, 1, 512]);
            let difference = max_difference(ours, reference);
            assert!(difference < 1e-3, "{dtype:?}: differs by {difference}");
        }
    }

    #[test]
    fn q8_0_rows_match_candles_product_token_by_token() {
        let device = Device::Cpu;
        // 131 rows: two bands and three rows, one tile of two and a single; seven tokens: a
        // group of four and three single tokens; one token: tiles of four rows and three singles.
        let values: Vec<f32> = (0..131 * 64)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let weights = Tensor::from_vec(values, (131, 64), &device).unwrap();
        for tokens in [1, 7] {
            let x: Vec<f32> = (0..tokens * 64)
                .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
                .collect();
            let x = Tensor::from_vec(x, (1, tokens, 64), &device).unwrap();
            let reference = QMatMul::from_qtensor(QTensor::quantize(&weights, GgmlDType::Q8_0).unwrap())
                .unwrap()
                .forward(&x)
                .unwrap();
            let ours = QuantLinear::new(QTensor::quantize(&weights, GgmlDType::Q8_0).unwrap())
                .unwrap()
                .forward(&x)
                .unwrap();
            assert_eq!(ours.dims(), &[1, tokens, 131]);
            let difference = max_difference(ours, reference);
            assert!(difference < 1e-3, "{tokens} tokens: differs by {difference}");
        }
    }
}
