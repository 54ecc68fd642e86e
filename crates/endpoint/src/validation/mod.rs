//! The simulator against a real server (`capsim validate`).
//!
//! Against a running server ([`EndpointScenario`], [`Validation`]): at each load, a fraction of
//! the scenario's calibrated capacity, the trace scaled to that rate is sent to the server and
//! simulated with the scenario's service model, with the compute time per batch size the server
//! reported (Triton's statistics, [`triton`]), and, from a Triton on the same machine, on the
//! run's own timeline (its per-request trace). Each load gives a [`LoadValidation`]; the run an
//! [`EndpointValidation`]. Against capsim's own live server (ONNX Runtime in process, which the
//! command brings in through [`LiveServer`] and [`MachineSpeed`]): a [`LiveValidation`] runs each
//! load into a [`LiveLoad`], with the figures, batches and level of the load ([`figure_rows`],
//! [`BatchReport`], [`Leveled`]).

mod comparison;
mod endpoint;
mod live;
mod live_loop;
mod loads;
pub(crate) mod speed_windows;
mod trace_sim;
pub mod triton;

use capsim_sim::build::build;
use capsim_sim::output::OutputError;
use capsim_sim::{BuiltScenario, Profiles, Scenario, SimError};

pub use comparison::{
    BatchShares, CalibratedCapacity, ComputeDrift, EndpointValidation, Figures, LoadValidation,
    Measured, MeasuredPath, RunService, SeedSpread, ServerBatchTime, ServerTimelineReport,
    Simulated, SpeedWindow,
};
pub use endpoint::{EndpointRun, EndpointScenario, ServiceModel, Validation};
pub use live::measurement_mismatch;
pub use live::{BatchReport, FigureRow, Leveled, figure_rows, figures_header, figures_text};
pub use live_loop::{
    LiveError, LiveInputs, LiveLoad, LiveRecords, LiveServer, LiveValidation, MachineSpeed,
    ReferenceShape, SpeedChange,
};
pub use loads::{check_loads, scaled_trace, served_lengths};

/// Why a validation could not run.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// The inputs (flags, scenario, profile, the server's answers) give no validation; the
    /// message says why and what to change.
    #[error("{0}")]
    BadInput(String),
    /// A folder for the records cannot be created.
    #[error("cannot create the folder {} ({source})", dir.display())]
    OutDir {
        /// The folder.
        dir: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A simulation failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// Records could not be written.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The live server or its speed probe failed (their own error, which the command that
    /// implements them reports).
    #[error("{0}")]
    Live(LiveError),
    /// A step failed; `context` says which, `source` why.
    #[error("{context}")]
    Context {
        /// The step.
        context: String,
        /// Its error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ValidationError {
    /// Wraps an error of the step `context`.
    fn context<E: std::error::Error + Send + Sync + 'static>(
        context: impl Into<String>,
    ) -> impl FnOnce(E) -> ValidationError {
        move |source| ValidationError::Context {
            context: context.into(),
            source: Box::new(source),
        }
    }
}

/// Builds a scenario the way the command does: a scenario that does not build is bad input.
fn build_scenario(
    scenario: &Scenario,
    profiles: &mut Profiles,
) -> Result<BuiltScenario, ValidationError> {
    build(scenario, profiles).map_err(|e| ValidationError::BadInput(e.to_string()))
}
