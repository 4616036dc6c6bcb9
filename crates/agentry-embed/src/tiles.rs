//! A weight matrix's 4-bit values regrouped for products with a few tokens (a query): in tiles
//! of [`TILE`] outputs, each expanded to f32 just before its product into a buffer that stays in
//! the cache, already in the column-major layout gemm's kernel reads without repacking. Reading
//! the f32 copy instead, a seventh of the bytes per weight more, made a query's products wait on
//! memory; the 4-bit values of all twelve layers (12 MB) fit in the L3 cache.

use half::f16;

use crate::file::{Q4_BLOCK, Q4_BLOCK_BYTES};
use crate::ops::vectorized;

/// Outputs per tile.
pub(crate) const TILE: usize = 64;
const HALF: usize = TILE / 2;

/// The tiles of an `(outputs, inputs)` matrix.
pub(crate) struct Tiles {
    /// Per tile, per input, `HALF` bytes: output `j`'s `q` in the low nibble of byte `j`,
    /// output `j + HALF`'s in the high nibble (a weight is `(q - 8) * scale`, as in Q4_0).
    nibbles: Vec<u8>,
    /// Per tile, per block of 32 inputs, the scale of each of its `TILE` outputs.
    scales: Vec<f32>,
    inputs: usize,
}

impl Tiles {
    /// From the matrix's Q4_0 rows (`inputs` a multiple of 32); outputs past the last are zero.
    pub(crate) fn new(blocks: &[u8], outputs: usize, inputs: usize) -> Result<Self, String> {
        let row_bytes = inputs / Q4_BLOCK * Q4_BLOCK_BYTES;
        if !inputs.is_multiple_of(Q4_BLOCK) || blocks.len() != outputs * row_bytes {
            return Err(format!(
                "{} bytes are not a {outputs}x{inputs} Q4_0 matrix",
                blocks.len()
            ));
        }
        let tiles = outputs.div_ceil(TILE);
        let per_row = inputs / Q4_BLOCK;
        let mut nibbles = vec![0x88u8; tiles * inputs * HALF];
        let mut scales = vec![0f32; tiles * per_row * TILE];
        for (o, row) in blocks.chunks_exact(row_bytes).enumerate() {
            let (tile, j) = (o / TILE, o % TILE);
            for (b, block) in row.chunks_exact(Q4_BLOCK_BYTES).enumerate() {
                scales[(tile * per_row + b) * TILE + j] = f16::from_le_bytes([block[0], block[1]]).to_f32();
                for i in 0..Q4_BLOCK {
                    let q = if i < 16 {
                        block[2 + i] & 0x0F
                    } else {
                        block[2 + i - 16] >> 4
                    };
                    let byte = &mut nibbles[(tile * inputs + b * Q4_BLOCK + i) * HALF + j % HALF];
                    *byte = if j < HALF {
                        (*byte & 0xF0) | q
                    } else {
                        (*byte & 0x0F) | (q << 4)
                    };
                }
            }
        }
        Ok(Tiles {
            nibbles,
            scales,
            inputs,
        })
    }

    /// Tile `tile`'s weights as `W^T`, `(inputs, TILE)` row by row, into `out`: the same f32
    /// values as the Q4_0 rows expand to.
    pub(crate) fn expand(&self, tile: usize, out: &mut [f32]) -> Result<(), String> {
        let inputs = self.inputs;
        let per_row = inputs / Q4_BLOCK;
        let (Some(nibbles), Some(scales), Some(out)) = (
            self.nibbles.get(tile * inputs * HALF..(tile + 1) * inputs * HALF),
            self.scales
                .get(tile * per_row * TILE..(tile + 1) * per_row * TILE),
            out.get_mut(..inputs * TILE),
        ) else {
            return Err(format!("there is no tile {tile} of weights"));
        };
        vectorized(
            #[inline(always)]
            || {
                for (p, (bytes, row)) in nibbles
                    .chunks_exact(HALF)
                    .zip(out.chunks_exact_mut(TILE))
                    .enumerate()
                {
                    let scale = &scales[p / Q4_BLOCK * TILE..][..TILE];
                    let (low, high) = row.split_at_mut(HALF);
                    let (low_scale, high_scale) = scale.split_at(HALF);
                    for (((b, l), h), (ls, hs)) in bytes
                        .iter()
                        .zip(low)
                        .zip(high)
                        .zip(low_scale.iter().zip(high_scale))
                    {
                        *l = (i32::from(b & 0x0F) - 8) as f32 * ls;
                        *h = (i32::from(b >> 4) - 8) as f32 * hs;
                    }
                }
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::dequantize_q4_0;
    use crate::file::tests::quantize;

    #[test]
    fn tiles_expand_to_the_rows_transposed() {
        let (outputs, inputs) = (70, 64);
        let values: Vec<f32> = (0..outputs * inputs)
            .map(|i| ((i * 7919) % 97) as f32 / 97.0 - 0.5)
            .collect();
        let blocks = quantize(&values, 0.07);
        let mut rows = vec![0f32; outputs * inputs];
        dequantize_q4_0(&blocks, &mut rows);
        let tiles = Tiles::new(&blocks, outputs, inputs).unwrap();
        let mut out = vec![0f32; inputs * TILE];
        for tile in 0..2 {
            tiles.expand(tile, &mut out).unwrap();
            for p in 0..inputs {
                for j in 0..TILE {
                    let o = tile * TILE + j;
                    let expected = if o < outputs { rows[o * inputs + p] } else { 0.0 };
                    assert_eq!(out[p * TILE + j], expected, "output {o}, input {p}");
                }
            }
        }
        assert!(tiles.expand(2, &mut out).is_err());
        assert!(Tiles::new(&blocks[1..], outputs, inputs).is_err());
    }
}
