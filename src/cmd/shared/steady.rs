//! The short-trace check that plan and sweep make before they answer, and simulate's note: a
//! trace too short for the load it drives gives a capacity no longer trace would confirm
//! (docs/report.md, "Steady state").

use anyhow::Result;
use capsim_report::{CapacityRow, Configuration, LoadKind, SweepSpec, Workload, configure};

use crate::cmd::BadInput;

/// Refuses (a usage error, exit 2) when the trace is too short to measure any of `rows` at its
/// capacity (the load the answer quotes) or at `asked`, the load the question asks (plan's
/// growth), whichever is higher: the higher the load, the shorter the replayed trace. Each row
/// costs one run.
pub fn refuse_short_trace<'r>(
    spec: &SweepSpec,
    workload: &Workload,
    rows: impl IntoIterator<Item = &'r CapacityRow>,
    asked: Option<f64>,
) -> Result<()> {
    for row in rows {
        let capacity = row
            .capacity_rps
            .filter(|c| c.mean > 0.0)
            .and_then(|c| capacity_load(workload, c.mean));
        let Some(load) = capacity.into_iter().chain(asked).reduce(f64::max) else {
            continue;
        };
        let configuration = Configuration {
            settings: row.settings.clone(),
        };
        let scenario = configure(&spec.base, &configuration)?;
        if let Some(short) = workload.check_length(
            &scenario,
            &spec.profiles,
            &row.configuration,
            load,
            spec.base_seed,
        )? {
            return Err(BadInput(short.to_string()).into());
        }
    }
    Ok(())
}

/// The load value of a capacity of `rate_rps`, in the workload's load unit; `None` for
/// closed-loop loads.
fn capacity_load(workload: &Workload, rate_rps: f64) -> Option<f64> {
    match workload.load_kind {
        LoadKind::RateScale => workload.trace_rate_rps.map(|r| rate_rps / r),
        LoadKind::TargetRate => Some(rate_rps),
        LoadKind::Concurrency => None,
    }
}

/// simulate's note when its run's steady window was too short for the trace's load.
pub fn short_trace_note(summary: &capsim_sim::Summary) -> Option<String> {
    let window = summary.steady_window.as_ref()?;
    let needs_s = window.too_short_needs_s?;
    Some(format!(
        "the trace is too short for a steady state at this load: a request lives {:.1} s on average, and a window of {} lifetimes after the warm-up and before the drain needs arrivals over {needs_s:.1} s; they span {:.1} s. The statistics describe a filling and draining system; use a longer trace or --extend-to",
        window.lifetime_s,
        capsim_sim::steady::SHORT_LIFETIMES,
        window.last_send_s
    ))
}
