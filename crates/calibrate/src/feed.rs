//! Random input tensors for a batch: valid token ids, normal floats.

use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};

use capsim_sim::rng::SimRng;
use ort::value::{DynValue, Tensor};

use crate::model::{DimPlan, ElementType, InputSpec};

/// Builds one batch's input tensors in host memory: integers uniform in `[0, vocab)`, floats
/// standard normal, booleans uniform, bytes uniform.
pub fn build_inputs(
    inputs: &[InputSpec],
    plan: &DimPlan,
    batch: u32,
    length: Option<u32>,
    vocab: u64,
    rng: &mut SimRng,
) -> ort::Result<Vec<(String, DynValue)>> {
    let mut values = Vec::with_capacity(inputs.len());
    for input in inputs {
        let shape = plan.shape(input, batch, length);
        let count: usize = shape.iter().map(|&d| d.max(0) as usize).product();
        let value = match input.element_type {
            ElementType::Int64 => {
                let data: Vec<i64> = (0..count)
                    .map(|_| rng.random_range(0..vocab) as i64)
                    .collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
            ElementType::Int32 => {
                let bound = vocab.min(i32::MAX as u64);
                let data: Vec<i32> = (0..count)
                    .map(|_| rng.random_range(0..bound) as i32)
                    .collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
            ElementType::Float32 => {
                let data: Vec<f32> = (0..count).map(|_| StandardNormal.sample(rng)).collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
            ElementType::Float64 => {
                let data: Vec<f64> = (0..count).map(|_| StandardNormal.sample(rng)).collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
            ElementType::Bool => {
                let data: Vec<bool> = (0..count).map(|_| rng.random()).collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
            ElementType::Uint8 => {
                let data: Vec<u8> = (0..count).map(|_| rng.random()).collect();
                Tensor::from_array((shape, data))?.into_dyn()
            }
        };
        values.push((input.name.clone(), value));
    }
    Ok(values)
}
