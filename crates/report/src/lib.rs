//! capsim's sweeps, capacity search, knee detection and plots.
//!
//! A sweep ([`run_sweep`]) runs a scenario over a [`Grid`] of configurations and a [`LoadAxis`],
//! judges each run against an [`Slo`], finds each configuration's capacity by bracketing and
//! bisection ([`search_capacity`]) and the knee of its latency curve by Kneedle, and draws the
//! curves ([`plot`]). [`write_sweep_outputs`] writes its files, [`write_report`] the review that
//! answers the planner's question ([`Review`], [`answer_sentence`]).
//!
//! ```
//! use capsim_report::{GridAxis, Slo};
//!
//! let slo: Slo = "e2e.p99<=800ms".parse().unwrap();
//! assert_eq!(slo.primary().bound_ns, 800_000_000);
//! let axis: GridAxis = "instances=1..4".parse().unwrap();
//! assert_eq!(axis.values.len(), 4);
//! ```

#![warn(missing_docs)]
#![warn(unnameable_types)]

mod basis;
mod capacity;
mod error;
mod experiment;
mod figures;
mod grid;
mod interval;
mod knee;
mod load;
mod output;
// The plots stay a namespace of their own (one `draw_*` function and its plot type per figure,
// curated by `plot/mod.rs`): `plot::draw_latency_cdf` reads better than a root full of them.
pub mod plot;
mod report;
mod review;
mod shard;
mod slo;
mod sweep;

pub use basis::{Basis, Question, Review, Sensitivity, ServiceSource};
pub use capacity::{
    Bracket, CANONICAL_MAX_CONCURRENCY, CANONICAL_MULTIPLE_RANGE, Capacity, Limit,
    MIN_ACHIEVED_FRACTION, Outcome, Probe, QueueGrowth, SearchError, SearchOptions,
    search_capacity,
};
pub use error::{ConfigurationError, ParseError, ReportError};
pub use experiment::{RunError, RunResult, ShortTrace, Workload, check_configurations, configure};
pub use grid::{Configuration, Grid, GridAxis, MAX_AXIS_VALUES, MAX_CONFIGURATIONS};
pub use interval::Estimate;
pub use knee::DEFAULT_SENSITIVITY as DEFAULT_KNEE_SENSITIVITY;
pub use load::{LoadAxis, LoadKind, Spacing};
pub use output::{OutputError, merge, read_sweep, write_capacity_csv, write_sweep_outputs};
pub use report::write_report;
pub use review::{
    SLOWER_SERVICE_FACTOR, answer_sentence, answering_row, carried_multiple, carrying,
    most_carrying, review_of, review_sweep, sensitivity_of, shard_sensitivities, slower_capacity,
};
pub use shard::Shard;
pub use slo::{LatencyStat, Metric, Objective, Slo};
pub use sweep::{
    CapacityRow, ConfigDetail, CurveRow, KneePoint, SweepError, SweepResult, SweepSpec, job_count,
    ranked, run_sweep,
};
