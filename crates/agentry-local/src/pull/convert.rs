//! Re-encoding a GGUF file's Q5_0 tensors as Q8_0: candle multiplies Q5_0 weights far more
//! slowly, and Q8_0 keeps at least their precision.

use std::path::Path;

use candle_core::Device;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};

use super::PullError;

/// Writes `input` to `output` with every Q5_0 tensor stored as Q8_0 (blocking). Returns how
/// many tensors were converted.
pub fn convert_q5_0_to_q8_0(input: &Path, output: &Path) -> Result<usize, PullError> {
    let fail = |reason: String| PullError::Convert {
        path: input.to_path_buf(),
        reason,
    };
    let mut reader =
        std::io::BufReader::new(std::fs::File::open(input).map_err(|e| PullError::io(input, &e))?);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| fail(e.to_string()))?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    // The file's own tensor order, so the result reads like the original.
    names.sort_by_key(|name| content.tensor_infos.get(*name).map(|t| t.offset));
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    let mut converted = 0;
    for name in names {
        let tensor = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(|e| fail(format!("tensor {name}: {e}")))?;
        let tensor = if tensor.dtype() == GgmlDType::Q5_0 {
            converted += 1;
            let values = tensor
                .dequantize(&Device::Cpu)
                .map_err(|e| fail(format!("tensor {name}: {e}")))?;
            QTensor::quantize(&values, GgmlDType::Q8_0).map_err(|e| fail(format!("tensor {name}: {e}")))?
        } else {
            tensor
        };
        tensors.push((name.clone(), tensor));
    }
    // The writer lays tensors out with its own alignment.
    let mut metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(key, _)| key.as_str() != "general.alignment")
        .map(|(key, value)| (key.as_str(), value))
        .collect();
    // A fixed order, so that converting the same file twice gives the same bytes.
    metadata.sort_by_key(|(key, _)| *key);
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(name, t)| (name.as_str(), t)).collect();
    let mut writer =
        std::io::BufWriter::new(std::fs::File::create(output).map_err(|e| PullError::io(output, &e))?);
    gguf_file::write(&mut writer, &metadata, &tensor_refs).map_err(|e| PullError::Convert {
        path: output.to_path_buf(),
        reason: e.to_string(),
    })?;
    let file = writer
        .into_inner()
        .map_err(|e| PullError::io(output, e.error()))?;
    file.sync_all().map_err(|e| PullError::io(output, &e))?;
    Ok(converted)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use candle_core::Tensor;

    use super::*;

    #[test]
    fn q5_0_tensors_become_q8_0_and_everything_else_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (input, output) = (dir.path().join("in.gguf"), dir.path().join("out.gguf"));
        let values: Vec<f32> = (0..256).map(|i| ((i as f32) * 0.37).sin()).collect();
        let weights = Tensor::from_vec(values, (4, 64), &Device::Cpu).unwrap();
        let slow = QTensor::quantize(&weights, GgmlDType::Q5_0).unwrap();
        let kept = QTensor::quantize(&weights, GgmlDType::Q4K)
            .unwrap_or_else(|_| QTensor::quantize(&weights, GgmlDType::F32).unwrap());
        let arch = gguf_file::Value::String("qwen2".into());
        let tokens = gguf_file::Value::Array(vec![
            gguf_file::Value::String("a".into()),
            gguf_file::Value::String("b".into()),
        ]);
        let mut file = std::fs::File::create(&input).unwrap();
        gguf_file::write(
            &mut file,
            &[
                ("general.architecture", &arch),
                ("tokenizer.ggml.tokens", &tokens),
            ],
            &[("slow.weight", &slow), ("kept.weight", &kept)],
        )
        .unwrap();
        drop(file);

        assert_eq!(convert_q5_0_to_q8_0(&input, &output).unwrap(), 1);

        let mut reader = std::fs::File::open(&output).unwrap();
        let content = gguf_file::Content::read(&mut reader).unwrap();
        assert_eq!(
            content
                .metadata
                .get("general.architecture")
                .unwrap()
                .to_string()
                .unwrap(),
            "qwen2"
        );
        assert!(content.metadata.contains_key("tokenizer.ggml.tokens"));
        let converted = content.tensor(&mut reader, "slow.weight", &Device::Cpu).unwrap();
        assert_eq!(converted.dtype(), GgmlDType::Q8_0);
        assert_eq!(converted.shape().dims(), &[4, 64]);
        let kept_again = content.tensor(&mut reader, "kept.weight", &Device::Cpu).unwrap();
        assert_eq!(kept_again.dtype(), kept.dtype());
        // Q8_0 holds the Q5_0 values almost exactly.
        let before = slow.dequantize(&Device::Cpu).unwrap();
        let after = converted.dequantize(&Device::Cpu).unwrap();
        let error: f32 = (before - after)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!(error < 0.01, "largest difference {error}");
    }
}
