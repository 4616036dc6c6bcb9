//! One token through the 56 feed-forward matrices of a Qwen2.5 1.5B (gate and up of 28 layers,
//! about 390 MB of Q4_K, so the weights come from memory as in generation): candle's tiled
//! product against row-by-row dot products on the GGUF blocks, the way `QuantLinear` does it.
//! `cargo run --release -p agentry-local --example gemv_probe -- MODEL.gguf` (set
//! `RAYON_NUM_THREADS` to compare thread counts).
#![allow(clippy::print_stdout, clippy::unwrap_used, unsafe_code)]
use candle_core::quantized::k_quants::{BlockQ4K, BlockQ8K, GgmlType};
use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let device = Device::Cpu;
    let mut mats = vec![];
    let mut raws = vec![];
    let mut k = 0;
    for l in 0..28 {
        for n in ["ffn_gate", "ffn_up"] {
            let name = format!("blk.{l}.{n}.weight");
            let q = content.tensor(&mut file, &name, &device).unwrap();
            let (rows, kk) = q.shape().dims2().unwrap();
            k = kk;
            raws.push((rows, q.data().unwrap().into_owned()));
            mats.push(QMatMul::from_qtensor(q).unwrap());
        }
    }
    let x = Tensor::randn(0f32, 1.0, (1, k), &device).unwrap();
    for m in &mats {
        m.forward(&x).unwrap();
    }
    let n = 10;
    let t = Instant::now();
    for _ in 0..n {
        for m in &mats {
            m.forward(&x).unwrap();
        }
    }
    println!(
        "candle QMatMul: {:.3} ms per matrix",
        t.elapsed().as_secs_f64() * 1000.0 / (n * mats.len()) as f64
    );
    let xv = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mut xq = vec![BlockQ8K::zeros(); k / 256];
    let t = Instant::now();
    for _ in 0..n {
        for (rows, bytes) in &raws {
            BlockQ8K::from_float(&xv, &mut xq);
            let mut out = vec![0f32; *rows];
            let blocks: &[BlockQ4K] =
                unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const BlockQ4K, rows * k / 256) };
            for (r, o) in out.iter_mut().enumerate() {
                *o = BlockQ4K::vec_dot(k, &blocks[r * k / 256..(r + 1) * k / 256], &xq);
            }
            std::hint::black_box(out);
        }
    }
    println!(
        "vec_dot rows: {:.3} ms per matrix",
        t.elapsed().as_secs_f64() * 1000.0 / (n * raws.len()) as f64
    );
}
