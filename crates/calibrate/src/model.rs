//! A model's inputs as calibration sees them, and how `--dim` bindings give every dynamic
//! dimension a value.

use std::collections::BTreeMap;
use std::path::Path;

use ort::session::Session;
use ort::value::{TensorElementType, ValueType};

use crate::CalibrateError;

/// The element types calibration can fill with random data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementType {
    /// Token ids or other integers: uniform below the vocabulary size.
    Int64,
    /// As `Int64`.
    Int32,
    /// Standard normal.
    Float32,
    /// Standard normal.
    Float64,
    /// Uniform 0/1 (masks).
    Bool,
    /// Uniform bytes (images).
    Uint8,
}

impl ElementType {
    /// The ONNX name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ElementType::Int64 => "int64",
            ElementType::Int32 => "int32",
            ElementType::Float32 => "float32",
            ElementType::Float64 => "float64",
            ElementType::Bool => "bool",
            ElementType::Uint8 => "uint8",
        }
    }
}

/// One dimension of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(u64),
    /// A size chosen at run time, with its symbolic name when the model gives one.
    Dynamic(Option<String>),
}

/// One input of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// Input name.
    pub name: String,
    /// Element type.
    pub element_type: ElementType,
    /// Dimensions; axis 0 is the batch.
    pub dims: Vec<Dim>,
}

impl InputSpec {
    /// The name `--dim` uses for a dynamic axis: its symbol, or `input:axis` when it has none.
    pub fn dim_name(&self, axis: usize) -> String {
        match &self.dims[axis] {
            Dim::Dynamic(Some(symbol)) if !symbol.is_empty() => symbol.clone(),
            _ => format!("{}:{axis}", self.name),
        }
    }

    /// The shape as profiles record it: numbers, or the dynamic axis's name.
    pub fn shape_strings(&self) -> Vec<String> {
        (0..self.dims.len())
            .map(|axis| match &self.dims[axis] {
                Dim::Fixed(size) => size.to_string(),
                Dim::Dynamic(_) => self.dim_name(axis),
            })
            .collect()
    }
}

/// Reads a session's inputs and checks that each has a dynamic batch axis (axis 0).
pub fn inputs_of(session: &Session, model: &Path) -> Result<Vec<InputSpec>, CalibrateError> {
    let mut specs = Vec::new();
    for outlet in session.inputs() {
        let ValueType::Tensor {
            ty,
            shape,
            dimension_symbols,
        } = outlet.dtype()
        else {
            return Err(CalibrateError::UnsupportedInput {
                model: model.to_path_buf(),
                input: outlet.name().to_string(),
                reason: format!("it is a {} (only tensors can be filled)", outlet.dtype()),
            });
        };
        let element_type = match ty {
            TensorElementType::Int64 => ElementType::Int64,
            TensorElementType::Int32 => ElementType::Int32,
            TensorElementType::Float32 => ElementType::Float32,
            TensorElementType::Float64 => ElementType::Float64,
            TensorElementType::Bool => ElementType::Bool,
            TensorElementType::Uint8 => ElementType::Uint8,
            other => {
                return Err(CalibrateError::UnsupportedInput {
                    model: model.to_path_buf(),
                    input: outlet.name().to_string(),
                    reason: format!(
                        "its element type {other:?} is not one calibration fills (int64, int32, float32, float64, bool, uint8)"
                    ),
                });
            }
        };
        let dims: Vec<Dim> = shape
            .iter()
            .enumerate()
            .map(|(axis, &size)| {
                if size >= 0 {
                    Dim::Fixed(size as u64)
                } else {
                    Dim::Dynamic(
                        dimension_symbols
                            .get(axis)
                            .filter(|s| !s.is_empty())
                            .cloned(),
                    )
                }
            })
            .collect();
        let spec = InputSpec {
            name: outlet.name().to_string(),
            element_type,
            dims,
        };
        if !matches!(spec.dims.first(), Some(Dim::Dynamic(_))) {
            return Err(CalibrateError::NoDynamicBatch {
                model: model.to_path_buf(),
                input: spec.name.clone(),
                shape: format!("[{}]", spec.shape_strings().join(", ")),
            });
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// `--dim` bindings resolved against a model: one dimension may take several values (the length
/// axis of the grid), the others one value each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimPlan {
    /// The axis the grid varies besides the batch, with its values (increasing).
    pub length: Option<(String, Vec<u32>)>,
    /// Dynamic dimensions held at one value.
    pub fixed: BTreeMap<String, u64>,
}

impl DimPlan {
    /// Resolves `bindings` (dimension name -> values) against the model's inputs. Every name
    /// must be a dynamic non-batch dimension of the model, every such dimension must be bound,
    /// and at most one may take several values.
    pub fn resolve(
        inputs: &[InputSpec],
        bindings: &BTreeMap<String, Vec<u32>>,
        model: &Path,
    ) -> Result<DimPlan, CalibrateError> {
        let mut dynamic: Vec<String> = Vec::new();
        for input in inputs {
            for axis in 1..input.dims.len() {
                if matches!(input.dims[axis], Dim::Dynamic(_)) {
                    let name = input.dim_name(axis);
                    if !dynamic.contains(&name) {
                        dynamic.push(name);
                    }
                }
            }
        }
        for name in bindings.keys() {
            if !dynamic.contains(name) {
                return Err(CalibrateError::UnknownDim {
                    model: model.to_path_buf(),
                    name: name.clone(),
                    available: dynamic.clone(),
                });
            }
        }
        let mut plan = DimPlan {
            length: None,
            fixed: BTreeMap::new(),
        };
        for name in &dynamic {
            let Some(values) = bindings.get(name) else {
                return Err(CalibrateError::UnboundDim {
                    model: model.to_path_buf(),
                    name: name.clone(),
                });
            };
            if values.len() == 1 {
                plan.fixed.insert(name.clone(), u64::from(values[0]));
            } else if let Some((other, _)) = &plan.length {
                return Err(CalibrateError::TwoLengthDims {
                    first: other.clone(),
                    second: name.clone(),
                });
            } else {
                let mut sorted = values.clone();
                sorted.sort_unstable();
                sorted.dedup();
                plan.length = Some((name.clone(), sorted));
            }
        }
        Ok(plan)
    }

    /// The concrete shape of `input` for a batch of `batch` at `length` (ignored without a
    /// length axis).
    pub fn shape(&self, input: &InputSpec, batch: u32, length: Option<u32>) -> Vec<i64> {
        (0..input.dims.len())
            .map(|axis| match &input.dims[axis] {
                Dim::Fixed(size) => *size as i64,
                Dim::Dynamic(_) if axis == 0 => i64::from(batch),
                Dim::Dynamic(_) => {
                    let name = input.dim_name(axis);
                    match (&self.length, length) {
                        (Some((length_name, _)), Some(l)) if *length_name == name => i64::from(l),
                        _ => self.fixed.get(&name).map_or(1, |&v| v as i64),
                    }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> InputSpec {
        InputSpec {
            name: "input_ids".into(),
            element_type: ElementType::Int64,
            dims: vec![
                Dim::Dynamic(Some("batch".into())),
                Dim::Dynamic(Some("seq".into())),
            ],
        }
    }

    fn bind(pairs: &[(&str, &[u32])]) -> BTreeMap<String, Vec<u32>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_bound_length_axis_shapes_the_inputs() {
        let plan = DimPlan::resolve(&[ids()], &bind(&[("seq", &[64, 16, 32])]), Path::new("m"))
            .expect("plan");
        assert_eq!(plan.length, Some(("seq".into(), vec![16, 32, 64])));
        assert_eq!(plan.shape(&ids(), 4, Some(32)), vec![4, 32]);
    }

    #[test]
    fn an_unknown_dim_name_lists_the_models_dimensions() {
        let err =
            DimPlan::resolve(&[ids()], &bind(&[("sequence", &[16])]), Path::new("m")).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("sequence") && message.contains("seq"),
            "{message}"
        );
    }

    #[test]
    fn an_unbound_dynamic_dim_is_an_error_that_says_how_to_bind_it() {
        let err = DimPlan::resolve(&[ids()], &BTreeMap::new(), Path::new("m")).unwrap_err();
        assert!(err.to_string().contains("--dim seq="), "{err}");
    }

    #[test]
    fn unnamed_dynamic_axes_are_named_input_colon_axis() {
        let input = InputSpec {
            name: "x".into(),
            element_type: ElementType::Float32,
            dims: vec![Dim::Dynamic(None), Dim::Dynamic(None), Dim::Fixed(3)],
        };
        assert_eq!(input.shape_strings(), vec!["x:0", "x:1", "3"]);
    }
}
