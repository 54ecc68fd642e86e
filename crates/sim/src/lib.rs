//! capsim's discrete-event engine and the model of the serving path.
//!
//! A [`Scenario`] (read from TOML) describes a serving system: client network, gateway
//! (admission control, load balancing), pre-processing workers, instance queues, Triton's
//! dynamic batcher, model execution with a [`ServiceTime`] model, and post-processing. It is
//! plain data; [`build::build`] turns it into a [`BuiltScenario`], its time models built (the one
//! step that reads profile files, through a [`Profiles`] cache). [`simulate`] replays a [`capsim_trace::Trace`] through it, deterministically for a given seed,
//! and returns a [`Summary`]; [`simulate_with_requests`] also keeps one [`RequestRecord`] per
//! request, and [`output`] writes `summary.json`, `requests.parquet` and `timeseries.parquet`.
//!
//! ```
//! use capsim_sim::build::{Profiles, build};
//! use capsim_sim::{RunOptions, Scenario, simulate};
//! use capsim_trace::{Columns, Trace};
//!
//! let scenario = Scenario::from_toml_str(r#"
//!     [batcher]
//!     max_batch_size = 4
//!     max_queue_delay = "1ms"
//!     [service]
//!     kind = "affine"
//!     a = "2ms"
//!     b = "0.5ms"
//! "#).unwrap();
//! let trace = Trace::from_columns(Columns {
//!     arrival_ns: (0..100).map(|i| i * 1_000_000).collect(),
//!     input_tokens: vec![16; 100],
//!     ..Columns::default()
//! }).unwrap();
//! let built = build(&scenario, &mut Profiles::default()).unwrap();
//! let summary = simulate(&built, &trace, &RunOptions { seed: 7, ..RunOptions::default() }).unwrap();
//! assert_eq!(summary.requests.completed, 100);
//! ```

#![warn(missing_docs)]

mod batcher;
pub mod build;
mod client;
mod compat;
mod context;
mod continuous;
mod engine;
mod event;
mod gateway;
mod host;
mod instance;
mod latency;
mod llm;
mod network;
mod observe;
pub mod output;
mod postprocess;
mod preprocess;
/// Durations, rates, bandwidths and sizes with units, parsed once at the edge (from the trace
/// crate, which parses the same durations in its transforms).
pub use capsim_trace::quantity;
mod queue;
pub mod record;
pub mod rng;
pub mod scenario;
pub mod steady;
pub mod summary;
pub mod theory;
mod time;
mod timeline;
pub mod timeseries;
pub mod timing;

pub use batcher::{Batcher, Decision};
pub use build::{BuiltScenario, Profiles};
pub use compat::Compat;
pub use engine::{
    Run, RunOptions, SimError, Warmup, latency_keys, run_with_sink, simulate,
    simulate_with_requests,
};
pub use llm::scheduler::{SchedulerConfig, Scheduling};
pub use record::{Outcome, RecordSink, RejectReason, RequestLog, RequestRecord};
pub use scenario::{Scenario, ScenarioError};
pub use summary::Summary;
pub use time::{SimTime, round_ns};
pub use timeline::{TimelineWindow, write_timeline_json};
pub use timing::service::{BatchShape, ServiceTime};
