//! capsim's sweeps, capacity search, knee detection and plots.
//!
//! A sweep runs a scenario over a [`grid::Grid`] of configurations and a [`load::LoadAxis`],
//! judges each run against an [`slo::Slo`], finds each configuration's capacity by bracketing
//! and bisection ([`capacity`]) and the knee of its latency curve by Kneedle ([`knee`]), and
//! draws the curves ([`plot`]).
//!
//! ```
//! use capsim_report::{grid::GridAxis, slo::Slo};
//!
//! let slo: Slo = "e2e.p99<=800ms".parse().unwrap();
//! assert_eq!(slo.primary().bound_ns, 800_000_000);
//! let axis: GridAxis = "instances=1..4".parse().unwrap();
//! assert_eq!(axis.values.len(), 4);
//! ```

#![warn(missing_docs)]

mod basis;
pub mod capacity;
pub mod error;
pub mod experiment;
pub mod figures;
pub mod grid;
pub mod interval;
pub mod knee;
pub mod load;
pub mod output;
pub mod plot;
pub mod report;
pub mod review;
pub mod shard;
pub mod slo;
pub mod sweep;

pub use error::{ConfigurationError, ParseError};
