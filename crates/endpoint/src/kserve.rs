//! The KServe v2 (Triton HTTP) inference protocol: a model's metadata
//! (`GET /v2/models/NAME`) and the JSON body of an inference request
//! (`POST /v2/models/NAME/infer`) whose dynamic dimensions are bound from the trace.

use bytes::Bytes;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use crate::EndpointError;

/// One input (or output) tensor as the server describes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TensorMetadata {
    /// Tensor name.
    pub name: String,
    /// KServe datatype: `BOOL`, `INT8`..`INT64`, `UINT8`..`UINT64`, `FP16`, `FP32`, `FP64`,
    /// `BF16` or `BYTES`.
    pub datatype: String,
    /// Dimensions; `-1` is dynamic.
    pub shape: Vec<i64>,
}

/// A model's metadata (the part a load generator needs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ModelMetadata {
    /// Model name.
    pub name: String,
    /// Its inputs.
    pub inputs: Vec<TensorMetadata>,
}

impl ModelMetadata {
    /// Parses the JSON of `GET /v2/models/NAME`; `url` names it in errors.
    pub fn parse(json: &[u8], url: &str) -> Result<ModelMetadata, EndpointError> {
        let metadata: ModelMetadata =
            serde_json::from_slice(json).map_err(|e| EndpointError::Protocol {
                url: url.to_string(),
                message: format!("the model metadata is not KServe v2 JSON ({e})"),
            })?;
        if metadata.inputs.is_empty() {
            return Err(EndpointError::Protocol {
                url: url.to_string(),
                message: "the model has no inputs".to_string(),
            });
        }
        for input in &metadata.inputs {
            if element_kind(&input.datatype).is_none() {
                return Err(EndpointError::Protocol {
                    url: url.to_string(),
                    message: format!(
                        "input `{}` has datatype {:?}, which capsim cannot fill",
                        input.name, input.datatype
                    ),
                });
            }
        }
        Ok(metadata)
    }

    /// The shape of each input for one request of `input_tokens` tokens: in a shape of two or
    /// more dimensions a leading `-1` is the batch (1); every other `-1` is the sequence length
    /// (`input_tokens`, at least 1), as `capsim calibrate --dim` binds them.
    pub fn bind_shapes(&self, input_tokens: u32) -> Vec<Vec<u64>> {
        let length = u64::from(input_tokens.max(1));
        self.inputs
            .iter()
            .map(|input| {
                input
                    .shape
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| match d {
                        -1 if i == 0 && input.shape.len() >= 2 => 1,
                        d if d < 0 => length,
                        d => d as u64,
                    })
                    .collect()
            })
            .collect()
    }

    /// The JSON body of an inference request for `input_tokens` tokens, with random valid
    /// data drawn from `seed` (integers below `vocab`, floats in [0, 1)). Its KServe `id` is
    /// `id` (capsim sends the trace row), which Triton writes into its trace as `request_id`,
    /// so the server's timestamps of each request can be joined to the client's.
    pub fn infer_body(&self, id: u64, input_tokens: u32, vocab: u64, seed: u64) -> Bytes {
        let mut rng = capsim_sim::rng::SimRng::seed_from_u64(seed);
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for (input, shape) in self.inputs.iter().zip(self.bind_shapes(input_tokens)) {
            let count: u64 = shape.iter().product();
            let kind = element_kind(&input.datatype).expect("checked by parse");
            let data: Vec<serde_json::Value> = (0..count)
                .map(|_| match kind {
                    Element::Int { max } => {
                        serde_json::Value::from(rng.random_range(0..vocab.clamp(1, max)))
                    }
                    Element::Float => serde_json::Value::from(rng.random::<f32>()),
                    Element::Bool => serde_json::Value::from(rng.random_bool(0.5)),
                    Element::Bytes => serde_json::Value::from("x"),
                })
                .collect();
            inputs.push(serde_json::json!({
                "name": input.name,
                "shape": shape,
                "datatype": input.datatype,
                "data": data,
            }));
        }
        Bytes::from(serde_json::json!({ "id": id.to_string(), "inputs": inputs }).to_string())
    }
}

/// What values a datatype takes.
#[derive(Debug, Clone, Copy)]
enum Element {
    /// Integers in `0..max`.
    Int {
        max: u64,
    },
    Float,
    Bool,
    Bytes,
}

fn element_kind(datatype: &str) -> Option<Element> {
    Some(match datatype {
        "INT8" => Element::Int { max: 1 << 7 },
        "UINT8" => Element::Int { max: 1 << 8 },
        "INT16" => Element::Int { max: 1 << 15 },
        "UINT16" => Element::Int { max: 1 << 16 },
        "INT32" => Element::Int { max: 1 << 31 },
        "UINT32" | "INT64" | "UINT64" => Element::Int { max: 1 << 32 },
        "FP16" | "BF16" | "FP32" | "FP64" => Element::Float,
        "BOOL" => Element::Bool,
        "BYTES" => Element::Bytes,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: &str = r#"{"name":"bert","versions":["1"],"platform":"python",
        "inputs":[{"name":"input_ids","datatype":"INT64","shape":[-1,-1]},
                  {"name":"mask","datatype":"INT64","shape":[-1,-1]}],
        "outputs":[{"name":"logits","datatype":"FP32","shape":[-1,2]}]}"#;

    #[test]
    fn dynamic_dimensions_bind_to_batch_one_and_the_input_length() {
        let m = ModelMetadata::parse(BERT.as_bytes(), "u").unwrap();
        assert_eq!(m.bind_shapes(7), vec![vec![1, 7], vec![1, 7]]);
        let flat = ModelMetadata::parse(
            br#"{"name":"f","inputs":[{"name":"x","datatype":"FP32","shape":[-1]},{"name":"y","datatype":"BOOL","shape":[3]}]}"#,
            "u",
        )
        .unwrap();
        assert_eq!(flat.bind_shapes(0), vec![vec![1], vec![3]]);
    }

    #[test]
    fn the_body_holds_one_value_per_element_below_the_vocabulary_and_is_reproducible() {
        let m = ModelMetadata::parse(BERT.as_bytes(), "u").unwrap();
        let body = m.infer_body(7, 5, 10, 42);
        assert_eq!(body, m.infer_body(7, 5, 10, 42), "same seed, same bytes");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["id"], "7",
            "the request id joins the server's trace to the row"
        );
        let data = v["inputs"][0]["data"].as_array().unwrap();
        assert_eq!(data.len(), 5);
        assert!(data.iter().all(|x| x.as_u64().unwrap() < 10));
        assert_eq!(v["inputs"][1]["shape"], serde_json::json!([1, 5]));
    }

    #[test]
    fn metadata_without_inputs_or_with_an_unknown_datatype_is_refused_naming_it() {
        let err = ModelMetadata::parse(br#"{"name":"m","inputs":[]}"#, "http://x/v2/models/m")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no inputs") && err.contains("http://x"),
            "{err}"
        );
        let err = ModelMetadata::parse(
            br#"{"name":"m","inputs":[{"name":"q","datatype":"COMPLEX","shape":[1]}]}"#,
            "u",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`q`") && err.contains("COMPLEX"), "{err}");
    }
}
