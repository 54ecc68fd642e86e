//! Step times composed from measured per-operator GPU times.
//!
//! Two public profilers' outputs are read into one [`OperatorTable`]: an LLMServingSim profiler
//! bundle (`meta.yaml` beside `tpN/dense.csv`, `per_sequence.csv`, `attention.csv`, and for
//! mixtures of experts `moe.csv`) and Vidur's tables (`mlp.csv`, with `all_reduce.csv` for tensor
//! parallelism; [`vidur`]). Times are kept in nanoseconds. A table holds one GPU, one model and
//! one tensor-parallel degree: the times of one rank.
//!
//! [`roofline`] is an analytic cost per operator whose coefficients, calibrated on one table,
//! predict another model's or another tensor-parallel degree's table on the same GPU;
//! [`accuracy`] measures how far they land.

pub mod accuracy;
mod curve;
mod grid;
pub mod llmservingsim;
pub mod roofline;
pub mod step;
mod table;
pub mod vidur;

pub use curve::Curve;
pub use grid::{AttentionGrid, GridError, MoeGrid};
pub use step::{OperatorStepError, OperatorStepTime};
pub use table::{Operator, OperatorScope, OperatorTable, OperatorTableError, TableFormat};
pub use vidur::read_all_reduce;
