//! ONNX Runtime for the commands that load it (`calibrate`, `replay --live`, `validate`): the
//! `--ep` flag, finding and loading the library, and its errors as the command reports them.

use anyhow::Result;
use capsim_calibrate::{CalibrateError, ProviderChoice, Runtime, library};
use clap::ValueEnum;

use crate::cmd::BadInput;

/// Execution provider flag values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Ep {
    /// ONNX Runtime's CPU provider.
    Cpu,
    /// The CUDA provider; fails when it cannot be registered.
    Cuda,
    /// CUDA when it can be registered, otherwise CPU (says which).
    Auto,
}

impl From<Ep> for ProviderChoice {
    fn from(ep: Ep) -> ProviderChoice {
        match ep {
            Ep::Cpu => ProviderChoice::Cpu,
            Ep::Cuda => ProviderChoice::Cuda,
            Ep::Auto => ProviderChoice::Auto,
        }
    }
}

/// A library error as the command reports it: bad input (exit 2) when the user can fix it.
pub fn user_facing(err: CalibrateError) -> anyhow::Error {
    if err.is_bad_input() {
        BadInput(err.to_string()).into()
    } else {
        err.into()
    }
}

/// Finds ONNX Runtime (`--ort-lib`, then the usual places) and loads it; what the user can fix
/// is bad input. Shared by `calibrate`, `replay --live` and `validate`.
pub fn load_runtime(ort_lib: Option<&std::path::Path>) -> Result<Runtime> {
    let location = library::locate(ort_lib).map_err(user_facing)?;
    Runtime::load(&location).map_err(user_facing)
}

/// The share of the timed runs' time the measuring thread waited for a CPU, when every grid
/// point recorded it.
pub fn cpu_wait_share(profile: &capsim_sim::timing::profile::Profile) -> Option<f64> {
    let (mut waited_ns, mut ran_ns) = (0.0, 0.0);
    for point in &profile.points {
        let runs = f64::from(point.iterations);
        waited_ns += point.cpu_wait_mean_ns? * runs;
        ran_ns += (point.latency_mean_ns + point.input_build_mean_ns) * runs;
    }
    (ran_ns > 0.0).then(|| waited_ns / ran_ns)
}
