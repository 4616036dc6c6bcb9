//! The Qwen2 network over quantized GGUF weights, with a key/value cache that can be cut back
//! to any prefix: the next step of a reply re-uses what the previous one computed and only
//! runs the new tokens.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, ggml_file, gguf_file};
use candle_core::{D, DType, Device, IndexOp, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

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
    q: QMatMul,
    q_bias: Tensor,
    k: QMatMul,
    k_bias: Tensor,
    v: QMatMul,
    v_bias: Tensor,
    o: QMatMul,
    ffn_norm: RmsNorm,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    /// Keys and values of the tokens seen so far, `(1, kv_heads, seen, head_dim)` each.
    cache: Option<(Tensor, Tensor)>,
}

/// The network and its cache.
pub(crate) struct Qwen2 {
    shape: Shape,
    embedding: QuantizedEmbedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    /// How many positions the cache holds.
    cached: usize,
}

impl Qwen2 {
    /// Loads the weights. `read` reads a tensor by name.
    pub(crate) fn load(
        content: &gguf_file::Content,
        mut read: impl FnMut(&str) -> Result<QTensor>,
        device: &Device,
    ) -> Result<Self> {
        let shape = Shape::from_metadata(content)?;
        if shape.heads == 0
            || shape.kv_heads == 0
            || shape.hidden % shape.heads != 0
            || shape.heads % shape.kv_heads != 0
        {
            return Err(candle_core::Error::Msg(format!(
                "the GGUF's attention shape is inconsistent: {} heads, {} key/value heads, width {}",
                shape.heads, shape.kv_heads, shape.hidden
            )));
        }
        let embedding_weights = read("token_embd.weight")?;
        let embedding = QuantizedEmbedding::new(&embedding_weights, shape.hidden)?;
        // Small Qwen2 models tie the output projection to the embedding.
        let output = match content.tensor_infos.contains_key("output.weight") {
            true => QMatMul::from_qtensor(read("output.weight")?)?,
            false => QMatMul::from_qtensor(embedding_weights)?,
        };
        let norm = RmsNorm::from_qtensor(read("output_norm.weight")?, shape.rms_eps)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let mut weight = |name: &str| read(&format!("blk.{i}.{name}"));
            layers.push(Layer {
                attn_norm: RmsNorm::from_qtensor(weight("attn_norm.weight")?, shape.rms_eps)?,
                q: QMatMul::from_qtensor(weight("attn_q.weight")?)?,
                q_bias: weight("attn_q.bias")?.dequantize(device)?,
                k: QMatMul::from_qtensor(weight("attn_k.weight")?)?,
                k_bias: weight("attn_k.bias")?.dequantize(device)?,
                v: QMatMul::from_qtensor(weight("attn_v.weight")?)?,
                v_bias: weight("attn_v.bias")?.dequantize(device)?,
                o: QMatMul::from_qtensor(weight("attn_output.weight")?)?,
                ffn_norm: RmsNorm::from_qtensor(weight("ffn_norm.weight")?, shape.rms_eps)?,
                gate: QMatMul::from_qtensor(weight("ffn_gate.weight")?)?,
                up: QMatMul::from_qtensor(weight("ffn_up.weight")?)?,
                down: QMatMul::from_qtensor(weight("ffn_down.weight")?)?,
                cache: None,
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

    /// Forgets every position from `len` on.
    /// The keys and values of the first `len` cached positions, per layer (`k0`, `v0`, ...).
    pub(crate) fn export_cache(&self, len: usize) -> Result<Vec<(String, Tensor)>> {
        if len == 0 || len > self.cached {
            return Err(candle_core::Error::Msg(format!(
                "cannot export {len} positions of a cache holding {}",
                self.cached
            )));
        }
        let mut tensors = Vec::with_capacity(self.layers.len() * 2);
        for (i, layer) in self.layers.iter().enumerate() {
            let Some((k, v)) = &layer.cache else {
                return Err(candle_core::Error::Msg("a layer has no cache".into()));
            };
            tensors.push((format!("k{i}"), k.narrow(2, 0, len)?.contiguous()?));
            tensors.push((format!("v{i}"), v.narrow(2, 0, len)?.contiguous()?));
        }
        Ok(tensors)
    }

    /// Replaces the cache with `len` positions exported by [`Qwen2::export_cache`] from the
    /// same model; the shapes are checked.
    pub(crate) fn import_cache(
        &mut self,
        tensors: &std::collections::HashMap<String, Tensor>,
        len: usize,
    ) -> Result<()> {
        let expected = [1, self.shape.kv_heads, len, self.shape.head_dim()];
        let mut caches = Vec::with_capacity(self.layers.len());
        for i in 0..self.layers.len() {
            let get = |name: String| -> Result<Tensor> {
                let t = tensors
                    .get(&name)
                    .ok_or_else(|| candle_core::Error::Msg(format!("{name} is missing")))?;
                if t.dims() != expected || t.dtype() != DType::F32 {
                    return Err(candle_core::Error::Msg(format!("{name} has the wrong shape")));
                }
                Ok(t.clone())
            };
            caches.push((get(format!("k{i}"))?, get(format!("v{i}"))?));
        }
        for (layer, cache) in self.layers.iter_mut().zip(caches) {
            layer.cache = Some(cache);
        }
        self.cached = len;
        Ok(())
    }

    pub(crate) fn truncate(&mut self, len: usize) -> Result<()> {
        if len >= self.cached {
            return Ok(());
        }
        for layer in &mut self.layers {
            layer.cache = match (len, layer.cache.take()) {
                (0, _) | (_, None) => None,
                (len, Some((k, v))) => Some((
                    k.narrow(2, 0, len)?.contiguous()?,
                    v.narrow(2, 0, len)?.contiguous()?,
                )),
            };
        }
        self.cached = len;
        Ok(())
    }

    /// Runs `tokens` after the cached positions; the logits of the last one.
    pub(crate) fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let pos = self.cached;
        let len = tokens.len();
        if len == 0 {
            return Err(candle_core::Error::Msg("no tokens to run".into()));
        }
        if pos + len > self.cos.dim(0)? {
            return Err(candle_core::Error::Msg(format!(
                "the conversation ({} tokens) is longer than the model's context of {} tokens",
                pos + len,
                self.cos.dim(0)?
            )));
        }
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
        let last = self.norm.forward(&x)?.i((.., len - 1, ..))?;
        self.output.forward(&last)?.squeeze(0)?.to_dtype(DType::F32)
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
        let (k, v) = match self.cache.take() {
            Some((past_k, past_v)) => (Tensor::cat(&[&past_k, &k], 2)?, Tensor::cat(&[&past_v, &v], 2)?),
            None => (k, v),
        };
        self.cache = Some((k.clone(), v.clone()));
        // Grouped-query attention without copying the keys and values for every head: the
        // query heads that share a key/value head are stacked as rows of one matrix.
        let repeat = shape.heads / shape.kv_heads;
        let kv_len = k.dim(2)?;
        let q = q.reshape((batch, shape.kv_heads, repeat * len, head_dim))?;
        let scores = (q.matmul(&k.t()?)? / (head_dim as f64).sqrt())?;
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
