//! Replay inputs: timings that only the run a simulation is compared with can give.
//!
//! A scenario holds what a planner can know before running (docs/scenario.md). A replay of a
//! measured run also needs what that run alone shows: the spread of its server's dispatch, its
//! hand-over per request, how often its batcher thread won the race at a batch's end, and the
//! windows in which its machine ran slow or stalled. `capsim validate --endpoint --server-trace`
//! measures them from the server's trace and hands them to the engine with
//! [`Scenario::set_replay`]; `capsim simulate --replay-inputs FILE` reads them from a file:
//!
//! ```toml
//! dispatch_residuals = [0.6, 0.8, 1.0, 1.1, 1.5]
//! release_latency_per_request = "12us"
//! thread_first_fraction = 0.3
//! slowdowns = [{ from = "1s", to = "2s", factor = 1.8 }]
//! pauses = [{ from = "3s", to = "3.02s" }]
//! ```
//!
//! They apply to the default pool. A simulation given them is a **replay**: its figures check
//! the model's logic against that run, not its accuracy.

use std::path::Path;

use serde::Deserialize;

use super::file::{PauseSpec, SlowdownSpec};
use super::{ScenarioError, invalid};
use crate::quantity::DurationNs;

/// The keys a replay-inputs file has, which a scenario file may not have (each with the scenario
/// key it was before it left the scenario).
pub const REPLAY_KEYS: [(&str, &str); 5] = [
    ("dispatch_residuals", "batcher.dispatch_residuals"),
    (
        "release_latency_per_request",
        "batcher.release_latency_per_request",
    ),
    ("thread_first_fraction", "batcher.thread_first_fraction"),
    ("slowdowns", "execution.slowdowns"),
    ("pauses", "execution.pauses"),
];

/// Timings measured from the run being replayed, as written (every one optional).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplayInputs {
    /// Dynamic batcher: measured-over-mean ratios of `batcher.dispatch_latency` (the server's
    /// spread of it): each batch that pays the dispatch waits the latency times one of them,
    /// drawn at random and rescaled to mean 1. Needs `batcher.dispatch_latency`. Default: every
    /// dispatch takes exactly the latency.
    #[serde(default)]
    pub dispatch_residuals: Option<Vec<f64>>,
    /// Dynamic batcher: added to `batcher.release_latency` for each request of the batch that
    /// ended (the backend sending each response before its instance thread returns). Default 0.
    #[serde(default)]
    pub release_latency_per_request: DurationNs,
    /// Dynamic batcher: the fraction of batch ends at which the batcher thread runs before the
    /// freed model instance takes the next payload (see [`crate::Batcher`]), 0 to 1. Default 0:
    /// the instance first.
    #[serde(default)]
    pub thread_first_fraction: f64,
    /// Windows of simulated time in which execution (a batch, or an LLM step's GPU time and CPU
    /// overhead) runs `factor` times slower (see [`crate::timing::slowdown`]); they stack with
    /// `execution.time_scale`. Default: none.
    #[serde(default)]
    pub slowdowns: Vec<SlowdownSpec>,
    /// Dynamic batcher: windows of simulated time in which nothing is dispatched: a batch whose
    /// compute would start inside one starts at its end. Default: none.
    #[serde(default)]
    pub pauses: Vec<PauseSpec>,
}

impl ReplayInputs {
    /// Parses replay inputs from TOML text; `origin` names the file in errors.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<ReplayInputs, ScenarioError> {
        toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: Some(origin.to_path_buf()),
            message: format!(
                "replay inputs: {} (a replay-inputs file takes {})",
                e.to_string().trim_end(),
                REPLAY_KEYS.map(|(k, _)| format!("`{k}`")).join(", ")
            ),
        })
    }

    /// Reads replay inputs from a TOML file.
    pub fn from_path(path: &Path) -> Result<ReplayInputs, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ReplayInputs::from_toml_str(&text, path)
    }

    /// Whether any input is given.
    pub fn is_empty(&self) -> bool {
        *self == ReplayInputs::default()
    }
}

/// The error for a replay input written as a scenario key, or `None` when `raw` (a scenario
/// file's table, or one pool's) has none. `prefix` is the pool's key prefix.
pub(super) fn written_in_scenario(raw: &toml::Table, prefix: &str) -> Option<ScenarioError> {
    let (name, key) = REPLAY_KEYS.iter().find(|(_, scenario_key)| {
        let (table, name) = scenario_key.split_once('.').expect("dotted");
        raw.get(table)
            .and_then(toml::Value::as_table)
            .is_some_and(|t| t.contains_key(name))
    })?;
    Some(invalid(
        &format!("{prefix}{key}"),
        format!(
            "is a replay input, measured from the run a simulation is compared with, not something a planner can set before running: `capsim validate --endpoint --server-trace` measures it; to replay given values, write `{name} = ...` in a replay-inputs file and pass `capsim simulate --replay-inputs FILE` (docs/scenario.md, \"Replay inputs\")"
        ),
    ))
}
