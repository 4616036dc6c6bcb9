//! Matrix products on f32 slices with the `gemm` crate (candle's own CPU kernel), called
//! directly: each product runs on one thread, and the encoder splits its work into tasks
//! itself, so that a task's bias, activation or norm runs on the rows it just computed, with no
//! other synchronisation than one join per product.

use gemm::{Parallelism, gemm};

/// A matrix read from a slice: element `(i, j)` is `data[i * row_stride + j * column_stride]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matrix<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) columns: usize,
    pub(crate) row_stride: usize,
    pub(crate) column_stride: usize,
}

impl<'a> Matrix<'a> {
    /// The `rows` x `columns` matrix stored row after row in `data`.
    pub(crate) fn rows(data: &'a [f32], rows: usize, columns: usize) -> Self {
        Matrix {
            data,
            rows,
            columns,
            row_stride: columns,
            column_stride: 1,
        }
    }
}

/// Whether every element of a `rows` x `columns` matrix with these strides lies in `len` values
/// and the strides fit gemm's `isize`.
fn fits(len: usize, rows: usize, columns: usize, row_stride: usize, column_stride: usize) -> bool {
    if isize::try_from(row_stride).is_err() || isize::try_from(column_stride).is_err() {
        return false;
    }
    if rows == 0 || columns == 0 {
        return true;
    }
    (rows - 1)
        .checked_mul(row_stride)
        .zip((columns - 1).checked_mul(column_stride))
        .and_then(|(a, b)| a.checked_add(b))
        .is_some_and(|last| last < len)
}

/// `out = a b` on this thread; `out` is row-major with rows `out_stride` apart (the values
/// between its rows are left alone).
#[allow(unsafe_code)] // gemm's only interface takes raw pointers: the checks below make it sound.
pub(crate) fn multiply(
    a: Matrix<'_>,
    b: Matrix<'_>,
    out: &mut [f32],
    out_stride: usize,
) -> Result<(), String> {
    let (m, k, n) = (a.rows, a.columns, b.columns);
    if b.rows != k
        || !fits(a.data.len(), m, k, a.row_stride, a.column_stride)
        || !fits(b.data.len(), k, n, b.row_stride, b.column_stride)
        || !fits(out.len(), m, n, out_stride, 1)
    {
        return Err(format!(
            "cannot multiply {m}x{k} by {}x{n} into {} values in rows of {out_stride}",
            b.rows,
            out.len()
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for row in out.chunks_mut(out_stride).take(m) {
            row[..n].fill(0.0);
        }
        return Ok(());
    }
    // SAFETY: gemm only has a raw-pointer interface. Every element it reads or writes lies in
    // its slice (`fits` above, with the strides converted losslessly); `out` is borrowed
    // mutably, so it overlaps neither input; `read_dst` is false, so `out` is written, never
    // read, and `Parallelism::None` keeps the work on this thread, inside these borrows.
    unsafe {
        gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            out_stride as isize,
            false,
            a.data.as_ptr(),
            a.column_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.column_stride as isize,
            b.row_stride as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: Matrix<'_>, b: Matrix<'_>) -> Vec<f32> {
        let mut out = Vec::new();
        for i in 0..a.rows {
            for j in 0..b.columns {
                out.push(
                    (0..a.columns)
                        .map(|p| {
                            a.data[i * a.row_stride + p * a.column_stride]
                                * b.data[p * b.row_stride + j * b.column_stride]
                        })
                        .sum(),
                );
            }
        }
        out
    }

    #[test]
    fn products_of_strided_matrices_are_right_and_bad_shapes_are_errors() {
        let data: Vec<f32> = (0..400).map(|i| (i % 13) as f32 - 6.0).collect();
        // a: 5x7 with rows 20 apart; b: 7x3 read transposed (columns 10 apart).
        let a = Matrix {
            data: &data,
            rows: 5,
            columns: 7,
            row_stride: 20,
            column_stride: 1,
        };
        let b = Matrix {
            data: &data[3..],
            rows: 7,
            columns: 3,
            row_stride: 1,
            column_stride: 10,
        };
        let mut out = vec![9f32; 5 * 4];
        multiply(a, b, &mut out, 4).unwrap();
        let expected = naive(a, b);
        for i in 0..5 {
            assert_eq!(&out[i * 4..i * 4 + 3], &expected[i * 3..i * 3 + 3]);
            assert_eq!(out[i * 4 + 3], 9.0);
        }
        assert!(multiply(a, b, &mut out[..18], 4).is_err());
        assert!(multiply(Matrix { rows: 20, ..a }, b, &mut out, 4).is_err());
        assert!(multiply(a, Matrix { rows: 6, ..b }, &mut out, 4).is_err());
    }
}
