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
use std::path::Path;

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

// Format detection lives with the parent, which holds both readers, so that the table's own
// module depends on neither reader (each reader depends on it).
impl OperatorTable {
    /// Reads the operator table in `dir` for `tensor_parallel` ranks, detecting its format: a
    /// folder holding `meta.yaml` is an LLMServingSim profiler bundle, one holding `mlp.csv`
    /// Vidur's tables (with `all_reduce.csv` beside it when there is one). Anything else is
    /// refused, saying which folder is expected.
    pub fn load(dir: &Path, tensor_parallel: u32) -> Result<OperatorTable, OperatorTableError> {
        if !dir.is_dir() {
            return Err(OperatorTableError::Missing {
                path: dir.to_path_buf(),
                what: "no such folder".into(),
                fix: "give the folder of an operator table".into(),
            });
        }
        if dir.join("meta.yaml").is_file() {
            return llmservingsim::read(dir, tensor_parallel);
        }
        if dir.join(vidur::MLP_FILE).is_file() {
            let all_reduce = dir.join("all_reduce.csv");
            return vidur::read(
                dir,
                tensor_parallel,
                all_reduce.is_file().then_some(all_reduce.as_path()),
            );
        }
        Err(not_a_table(dir))
    }

    /// The tensor-parallel degrees the table in `dir` has, detecting its format as
    /// [`OperatorTable::load`] does: a bundle's `tp_degrees`, the degrees of Vidur's `mlp.csv`
    /// rows.
    pub fn tensor_parallel_degrees(dir: &Path) -> Result<Vec<u32>, OperatorTableError> {
        if dir.join("meta.yaml").is_file() {
            return llmservingsim::tensor_parallel_degrees(dir);
        }
        if dir.join(vidur::MLP_FILE).is_file() {
            return vidur::tensor_parallel_degrees(dir);
        }
        Err(not_a_table(dir))
    }
}

fn not_a_table(dir: &Path) -> OperatorTableError {
    OperatorTableError::Missing {
        path: dir.to_path_buf(),
        what: "no operator table here".into(),
        fix: "give the folder holding meta.yaml and tpN/ (an LLMServingSim profiler bundle), \
              or Vidur's folder holding mlp.csv"
            .into(),
    }
}
