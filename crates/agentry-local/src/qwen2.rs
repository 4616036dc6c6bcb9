//! The Qwen2 network over quantized GGUF weights, with a key/value cache that can be cut back
//! to any prefix: the next step of a reply re-uses what the previous one computed and only
//! runs the new tokens.

use candle_core::quantized::{GgmlDType, QTensor, ggml_file, gguf_file};
use candle_core::{D, DType, Device, IndexOp, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use crate::linear::QuantLinear;

/// The shape of the network, from the GGUF metadata.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) layers: usize,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) hidden: usize,
    pub(crate) context: usize,
    rms_eps: f64,
    rope_theta: f32,
}

impl Shape {
    pub(crate) fn from_metadata(content: &gguf_file::Content) -> Result<Self> {
        let get = |key: &str| {
            content
                .metadata
                .get(&format!("qwen2.{key}"))
                .ok_or_else(|| candle_core::Error::Msg(format!("the GGUF has no qwen2.{key}")))
        };
        Ok(Shape {
            layers: get("block_count")?.to_u32()? as usize,
            heads: get("attention.head_count")?.to_u32()? as usize,
            kv_heads: get("attention.head_count_kv")?.to_u32()? as usize,
            hidden: get("embedding_length")?.to_u32()? as usize,
            context: get("context_length")?.to_u32()? as usize,
            rms_eps: f64::from(get("attention.layer_norm_rms_epsilon")?.to_f32()?),
            rope_theta: get("rope.freq_base")?.to_f32()?,
        })
    }

    fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

struct Layer {
    attn_norm: RmsNorm,
    q: QuantLinear,
    q_bias: Tensor,
    k: QuantLinear,
    k_bias: Tensor,
    v: QuantLinear,
    v_bias: Tensor,
    o: QuantLinear,
    ffn_norm: RmsNorm,
    gate: QuantLinear,
    up: QuantLinear,
    down: QuantLinear,
    /// Keys and values of the tokens seen so far.
    cache: KvBuffer,
}

/// Keys and values of one layer in buffers with room to spare, `(1, kv_heads, capacity,
/// head_dim)` each: a step writes its new positions in place instead of copying the whole cache
/// into a new tensor (at 1,700 positions that copy was about 100 MB per generated token).
#[derive(Default)]
struct KvBuffer {
    buffers: Option<(Tensor, Tensor)>,
    len: usize,
}

impl KvBuffer {
    /// The smallest buffer, in positions: a system block and a question fit without a resize.
    const MIN_CAPACITY: usize = 2048;

    /// Appends `(1, kv_heads, n, head_dim)` keys and values; returns views of every position.
    fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let added = k.dim(2)?;
        let needed = self.len + added;
        let capacity = match &self.buffers {
            Some((buffer, _)) => buffer.dim(2)?,
            None => 0,
        };
        if needed > capacity {
            let capacity = needed.max(capacity * 2).max(Self::MIN_CAPACITY);
            let grown = |new: &Tensor, old: Option<&Tensor>| -> Result<Tensor> {
                let (batch, heads, _, head_dim) = new.dims4()?;
                let buffer = Tensor::zeros((batch, heads, capacity, head_dim), new.dtype(), new.device())?;
                if let Some(old) = old.filter(|_| self.len > 0) {
                    buffer.slice_set(&old.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                }
                Ok(buffer)
            };
            let old = self.buffers.take();
            self.buffers = Some((
                grown(k, old.as_ref().map(|(k, _)| k))?,
                grown(v, old.as_ref().map(|(_, v)| v))?,
            ));
        }
        let Some((k_buffer, v_buffer)) = &self.buffers else {
            return Err(candle_core::Error::Msg("the key/value buffer is missing".into()));
        };
        k_buffer.slice_set(&k.contiguous()?, 2, self.len)?;
        v_buffer.slice_set(&v.contiguous()?, 2, self.len)?;
        self.len = needed;
        Ok((k_buffer.narrow(2, 0, needed)?, v_buffer.narrow(2, 0, needed)?))
    }

    /// Copies of positions `start..end`.
    fn export(&self, start: usize, end: usize) -> Result<(Tensor, Tensor)> {
        match &self.buffers {
            Some((k, v)) if start < end && end <= self.len => Ok((
                k.narrow(2, start, end - start)?.contiguous()?,
                v.narrow(2, start, end - start)?.contiguous()?,
            )),
            _ => Err(candle_core::Error::Msg(
                "a layer's cache is shorter than asked".into(),
            )),
        }
    }

    /// Forgets every position from `len` on; the memory stays for the next steps.
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// The network and its cache.
pub(crate) struct Qwen2 {
    shape: Shape,
    embedding: QuantizedEmbedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QuantLinear,
    cos: Tensor,
    sin: Tensor,
    /// How many positions the cache holds.
    cached: usize,
}

impl Qwen2 {
    /// Loads the weights. `read` reads a tensor by name.
    pub(crate) fn load(
        content: &gguf_file::Content,
        read: impl FnMut(&str) -> Result<QTensor>,
        device: &Device,
    ) -> Result<Self> {
        let shape = Shape::from_metadata(content)?;
        let tied_output = !content.tensor_infos.contains_key("output.weight");
        Self::from_weights(shape, tied_output, read, device)
    }

    /// The network of `shape`; `tied_output` when the output projection is the embedding.
    fn from_weights(
        shape: Shape,
        tied_output: bool,
        mut read: impl FnMut(&str) -> Result<QTensor>,
        device: &Device,
    ) -> Result<Self> {
        if shape.heads == 0
            || shape.kv_heads == 0
            || !shape.hidden.is_multiple_of(shape.heads)
            || !shape.heads.is_multiple_of(shape.kv_heads)
        {
            return Err(candle_core::Error::Msg(format!(
                "the GGUF's attention shape is inconsistent: {} heads, {} key/value heads, width {}",
                shape.heads, shape.kv_heads, shape.hidden
            )));
        }
        let embedding_weights = read("token_embd.weight")?;
        let embedding = QuantizedEmbedding::new(&embedding_weights, shape.hidden)?;
        // Small Qwen2 models tie the output projection to the embedding.
        let output = match tied_output {
            false => QuantLinear::new(read("output.weight")?)?,
            true => QuantLinear::new(embedding_weights)?,
        };
        let norm = RmsNorm::from_qtensor(read("output_norm.weight")?, shape.rms_eps)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let mut weight = |name: &str| read(&format!("blk.{i}.{name}"));
            layers.push(Layer {
                attn_norm: RmsNorm::from_qtensor(weight("attn_norm.weight")?, shape.rms_eps)?,
                q: QuantLinear::new(weight("attn_q.weight")?)?,
                q_bias: weight("attn_q.bias")?.dequantize(device)?,
                k: QuantLinear::new(weight("attn_k.weight")?)?,
                k_bias: weight("attn_k.bias")?.dequantize(device)?,
                v: QuantLinear::new(weight("attn_v.weight")?)?,
                v_bias: weight("attn_v.bias")?.dequantize(device)?,
                o: QuantLinear::new(weight("attn_output.weight")?)?,
                ffn_norm: RmsNorm::from_qtensor(weight("ffn_norm.weight")?, shape.rms_eps)?,
                gate: QuantLinear::new(weight("ffn_gate.weight")?)?,
                up: QuantLinear::new(weight("ffn_up.weight")?)?,
                down: QuantLinear::new(weight("ffn_down.weight")?)?,
                cache: KvBuffer::default(),
            });
        }
        let (cos, sin) = rope_tables(&shape, device)?;
        Ok(Qwen2 {
            shape,
            embedding,
            layers,
            norm,
            output,
            cos,
            sin,
            cached: 0,
        })
    }

    /// The context length the model was trained for.
    pub(crate) fn context(&self) -> usize {
        self.shape.context
    }

    /// The keys and values of cached positions `start..end`, per layer (`k0`, `v0`, ...).
    pub(crate) fn export_cache(&self, start: usize, end: usize) -> Result<Vec<(String, Tensor)>> {
        if start >= end || end > self.cached {
            return Err(candle_core::Error::Msg(format!(
                "cannot export positions {start}..{end} of a cache holding {}",
                self.cached
            )));
        }
        let mut tensors = Vec::with_capacity(self.layers.len() * 2);
        for (i, layer) in self.layers.iter().enumerate() {
            let (k, v) = layer.cache.export(start, end)?;
            tensors.push((format!("k{i}"), k));
            tensors.push((format!("v{i}"), v));
        }
        Ok(tensors)
    }

    /// Appends to the cache `take` positions, from position `skip`, of keys and values
    /// exported by [`Qwen2::export_cache`] from the same model; the shapes are checked first,
    /// so a refused chunk changes nothing.
    pub(crate) fn extend_cache(
        &mut self,
        tensors: &std::collections::HashMap<String, Tensor>,
        skip: usize,
        take: usize,
    ) -> Result<()> {
        let mut parts = Vec::with_capacity(self.layers.len());
        for i in 0..self.layers.len() {
            let get = |name: String| -> Result<Tensor> {
                let t = tensors
                    .get(&name)
                    .ok_or_else(|| candle_core::Error::Msg(format!("{name} is missing")))?;
                let fits = matches!(t.dims(), [1, heads, len, dim]
                    if *heads == self.shape.kv_heads && *dim == self.shape.head_dim() && skip + take <= *len);
                if !fits || t.dtype() != DType::F32 {
                    return Err(candle_core::Error::Msg(format!("{name} has the wrong shape")));
                }
                t.narrow(2, skip, take)
            };
            parts.push((get(format!("k{i}"))?, get(format!("v{i}"))?));
        }
        for (i, (k, v)) in parts.iter().enumerate() {
            if let Err(e) = self.layers[i].cache.append(k, v) {
                // Every layer back to the same length: `truncate` trusts `cached`.
                for layer in &mut self.layers[..i] {
                    layer.cache.truncate(self.cached);
                }
                return Err(e);
            }
        }
        self.cached += take;
        Ok(())
    }

    pub(crate) fn truncate(&mut self, len: usize) -> Result<()> {
        if len >= self.cached {
            return Ok(());
        }
        for layer in &mut self.layers {
            layer.cache.truncate(len);
        }
        self.cached = len;
        Ok(())
    }

    /// Runs `tokens` after the cached positions; the logits of the last one.
    pub(crate) fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        // A long prompt runs in chunks: the attention scores of one chunk are
        // `heads x chunk x seen` floats, which for 2,000 tokens at once would be 190 MB per layer.
        if self.cached + tokens.len() > self.cos.dim(0)? {
            return Err(candle_core::Error::Msg(format!(
                "the conversation ({} tokens) is longer than the model's context of {} tokens",
                self.cached + tokens.len(),
                self.cos.dim(0)?
            )));
        }
        let mut last = None;
        for chunk in tokens.chunks(Self::PROMPT_CHUNK) {
            last = Some(self.forward_chunk(chunk)?);
        }
        // Only the last position of the last chunk needs the output projection.
        let last = last.ok_or_else(|| candle_core::Error::Msg("no tokens to run".into()))?;
        self.output
            .forward(&self.norm.forward(&last)?)?
            .squeeze(0)?
            .to_dtype(DType::F32)
    }

    /// Tokens run at once at most.
    const PROMPT_CHUNK: usize = 512;

    /// Runs a non-empty chunk that fits the context; the hidden state of its last position.
    fn forward_chunk(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let pos = self.cached;
        let len = tokens.len();
        let device = self.cos.device().clone();
        let mask = (len > 1).then(|| causal_mask(len, pos, &device)).transpose()?;
        let cos = self.cos.narrow(0, pos, len)?;
        let sin = self.sin.narrow(0, pos, len)?;
        let mut x = self.embedding.rows(tokens, &device)?.unsqueeze(0)?;
        for layer in &mut self.layers {
            let attended = layer.attend(
                &layer.attn_norm.forward(&x)?,
                &self.shape,
                &cos,
                &sin,
                mask.as_ref(),
            )?;
            x = (attended + x)?;
            let normed = layer.ffn_norm.forward(&x)?;
            let gated =
                (candle_nn::ops::silu(&layer.gate.forward(&normed)?)? * layer.up.forward(&normed)?)?;
            x = (layer.down.forward(&gated)? + x)?;
        }
        self.cached = pos + len;
        x.i((.., len - 1, ..))
    }
}

/// The token embedding kept in its quantized form (a 151,936-row table is about 0.9 GB as
/// f32); only the rows of the tokens being run are expanded.
struct QuantizedEmbedding {
    dtype: GgmlDType,
    data: Vec<u8>,
    row_bytes: usize,
    rows: usize,
    hidden: usize,
}

impl QuantizedEmbedding {
    fn new(weights: &QTensor, hidden: usize) -> Result<Self> {
        let (rows, width) = weights.shape().dims2()?;
        let dtype = weights.dtype();
        if width != hidden || !hidden.is_multiple_of(dtype.block_size()) {
            return Err(candle_core::Error::Msg(format!(
                "the token embedding is {rows}x{width}, expected rows of {hidden} in whole blocks"
            )));
        }
        Ok(QuantizedEmbedding {
            dtype,
            data: weights.data()?.into_owned(),
            row_bytes: hidden / dtype.block_size() * dtype.type_size(),
            rows,
            hidden,
        })
    }

    /// `(tokens.len(), hidden)` f32 rows.
    fn rows(&self, tokens: &[u32], device: &Device) -> Result<Tensor> {
        let mut bytes = Vec::with_capacity(tokens.len() * self.row_bytes);
        for &token in tokens {
            let token = token as usize;
            if token >= self.rows {
                return Err(candle_core::Error::Msg(format!(
                    "token {token} is outside the vocabulary of {}",
                    self.rows
                )));
            }
            let start = token * self.row_bytes;
            let row = self
                .data
                .get(start..start + self.row_bytes)
                .ok_or_else(|| candle_core::Error::Msg(format!("the token embedding has no row {token}")))?;
            bytes.extend_from_slice(row);
        }
        ggml_file::qtensor_from_ggml(self.dtype, &bytes, vec![tokens.len(), self.hidden], device)?
            .dequantize(device)
    }
}

impl Layer {
    fn attend(
        &mut self,
        x: &Tensor,
        shape: &Shape,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (batch, len, _) = x.dims3()?;
        let head_dim = shape.head_dim();
        let split = |t: Tensor, heads: usize| -> Result<Tensor> {
            t.reshape((batch, len, heads, head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.q.forward(x)?.broadcast_add(&self.q_bias)?, shape.heads)?;
        let k = split(self.k.forward(x)?.broadcast_add(&self.k_bias)?, shape.kv_heads)?;
        let v = split(self.v.forward(x)?.broadcast_add(&self.v_bias)?, shape.kv_heads)?;
        let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
        let (k, v) = self.cache.append(&k, &v)?;
        // Grouped-query attention without copying the keys and values for every head: the
        // query heads that share a key/value head are stacked as rows of one matrix.
        let repeat = shape.heads / shape.kv_heads;
        let kv_len = k.dim(2)?;
        let q = (q.reshape((batch, shape.kv_heads, repeat * len, head_dim))? / (head_dim as f64).sqrt())?;
        let scores = q.matmul(&k.t()?)?;
        let scores = match mask {
            Some(mask) => scores
                .reshape((batch, shape.kv_heads, repeat, len, kv_len))?
                .broadcast_add(mask)?
                .reshape((batch, shape.kv_heads, repeat * len, kv_len))?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = weights
            .matmul(&v)?
            .reshape((batch, shape.heads, len, head_dim))?
            .transpose(1, 2)?
            .reshape((batch, len, shape.hidden))?;
        self.o.forward(&out)
    }
}

/// `(len, pos + len)`: 0 where a new token may look (every cached position and the new ones up
/// to itself), minus infinity after.
fn causal_mask(len: usize, pos: usize, device: &Device) -> Result<Tensor> {
    let width = pos + len;
    let values: Vec<f32> = (0..len)
        .flat_map(|i| (0..width).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(values, (len, width), device)
}

/// Rotary position tables for every position of the context: `(context, head_dim / 2)`.
fn rope_tables(shape: &Shape, device: &Device) -> Result<(Tensor, Tensor)> {
    let head_dim = shape.head_dim();
    let inverse: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1.0 / shape.rope_theta.powf(i as f32 / head_dim as f32))
        .collect();
    let inverse = Tensor::from_vec(inverse, (1, head_dim / 2), device)?;
    let positions = Tensor::arange(0u32, shape.context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((shape.context, 1))?;
    let angles = positions.matmul(&inverse)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// The index of the largest logit.
pub(crate) fn argmax(logits: &Tensor) -> Result<u32> {
    logits.argmax(D::Minus1)?.to_scalar::<u32>()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A Qwen2 of two small layers with random weights, and a vocabulary of 50 tokens.
    fn tiny() -> Qwen2 {
        let shape = Shape {
            layers: 2,
            heads: 4,
            kv_heads: 2,
            hidden: 32,
            context: 4096,
            rms_eps: 1e-6,
            rope_theta: 10_000.0,
        };
        let device = Device::Cpu;
        let dims = |name: &str| -> Vec<usize> {
            let kv = 2 * 8;
            match name.rsplit_once('.').map_or(name, |(head, _)| head) {
                "token_embd" => vec![50, 32],
                n if n.ends_with("attn_k") || n.ends_with("attn_v") => {
                    if name.ends_with("bias") {
                        vec![kv]
                    } else {
                        vec![kv, 32]
                    }
                }
                n if n.ends_with("ffn_gate") || n.ends_with("ffn_up") => vec![64, 32],
                n if n.ends_with("ffn_down") => vec![32, 64],
                n if n.ends_with("norm") => vec![32],
                _ if name.ends_with("bias") => vec![32],
                _ => vec![32, 32],
            }
        };
        let mut seed = 0u64;
        Qwen2::from_weights(
            shape,
            true,
            |name| {
                // The same weights on every call: both models of a test read the names in
                // the same order.
                let dims = dims(name);
                let count = dims.iter().product::<usize>();
                let values: Vec<f32> = (0..count)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        let unit = (seed >> 40) as f32 / (1u64 << 24) as f32;
                        match name.ends_with("norm.weight") {
                            true => 0.5 + unit,
                            false => unit - 0.5,
                        }
                    })
                    .collect();
                QTensor::quantize(&Tensor::from_vec(values, dims, &device)?, GgmlDType::F32)
            },
            &device,
        )
        .unwrap()
    }

    fn tokens(n: usize) -> Vec<u32> {
        (0..n).map(|i| ((i * 7 + 3) % 50) as u32).collect()
    }

    fn max_difference(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn a_prompt_run_at_once_in_chunks_matches_one_run_in_pieces() {
        // 2,100 tokens: more than one chunk, and more than the first buffer holds.
        let all = tokens(2100);
        let mut at_once = tiny();
        let whole = at_once.forward(&all).unwrap();
        let mut in_pieces = tiny();
        in_pieces.forward(&all[..700]).unwrap();
        in_pieces.forward(&all[700..2095]).unwrap();
        let mut last = None;
        for token in &all[2095..] {
            last = Some(in_pieces.forward(&[*token]).unwrap());
        }
        let difference = max_difference(&whole, &last.unwrap());
        assert!(difference < 1e-3, "logits differ by {difference}");
    }

    #[test]
    fn a_cut_back_cache_answers_like_a_fresh_one() {
        let all = tokens(600);
        let mut cut = tiny();
        cut.forward(&all).unwrap();
        cut.truncate(300).unwrap();
        let other: Vec<u32> = tokens(40).into_iter().map(|t| (t + 1) % 50).collect();
        let after_cut = cut.forward(&other).unwrap();
        let mut fresh = tiny();
        fresh.forward(&all[..300]).unwrap();
        let expected = fresh.forward(&other).unwrap();
        let difference = max_difference(&after_cut, &expected);
        assert!(difference < 1e-3, "logits differ by {difference}");
    }
}
