//! The service time fitted to Triton's statistics of a model, which `capsim fit --log
//! stats.json` reads from a file and `capsim calibrate --endpoint` measures through the server:
//! each batch size's mean compute time (`capsim_endpoint::measured_service::fit_affine`) made a
//! scenario by `capsim_fit::batch_means`.

use anyhow::Result;
use capsim_endpoint::measured_service::fit_affine;
use capsim_endpoint::triton::ModelStats;
use capsim_fit::batch_means::{
    BatchMeansFit, PaddedLine, SizeMean, fit_batch_means, fit_padded_line,
};
use capsim_sim::Scenario;

use crate::cmd::BadInput;

/// `scenario` with `[service]` a + b * size fitted to `stats`' mean compute time per batch
/// size, weighted by its batches, and `[postprocess] base` its time per request outside the
/// queue and the model. Where `lengths` (the input lengths of the requests sent, as the server
/// took them) differ, `a + b * size + c * size * E[longest]` instead
/// ([`capsim_fit::batch_means::fit_padded_line`]): a model whose time grows with the padded
/// batch. `source` names where the statistics came from in errors. Fewer than two batch sizes
/// cannot tell a from b: an error that says what run would, unless the scenario's pool never
/// batches (`max_batch_size = 1`), where a is the one size's time and b = 0.
pub fn fit_triton_stats(
    scenario: &Scenario,
    stats: &ModelStats,
    lengths: &[u32],
    source: &str,
) -> Result<BatchMeansFit> {
    let times = stats.batch_times();
    // A pool that never batches needs its one size's time only: a, with b = 0.
    let unbatched = scenario.pools()[0].batcher.max_batch_size <= 1;
    if times.len() < 2 && !(unbatched && times.len() == 1) {
        return Err(BadInput(format!(
            "{source}: Triton's statistics of model {:?} hold batches of {} size{} ({}), so the \
             time per request (b) cannot be told apart from the time per batch (a); take them \
             after a run whose batches had several sizes (a load that queues requests with \
             max_batch_size > 1)",
            stats.name,
            times.len(),
            if times.len() == 1 { "" } else { "s" },
            times
                .iter()
                .map(|t| t.batch_size.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    let sizes: Vec<SizeMean> = times
        .iter()
        .map(|t| SizeMean {
            batch_size: t.batch_size,
            batches: t.batches,
            mean_ns: t.mean_ns,
        })
        .collect();
    let overhead_ns = stats.request_times().map(|t| t.outside_ns());
    let padded = lengths.iter().min() != lengths.iter().max() && times.len() >= 2;
    if let Some(line) = padded.then(|| fit_padded_line(&sizes, lengths)).flatten() {
        return Ok(
            fit_batch_means(scenario, &sizes, line, lengths, overhead_ns)
                .map_err(|e| BadInput(e.to_string()))?,
        );
    }
    let line = if unbatched && times.len() == 1 {
        capsim_endpoint::measured_service::AffineFit {
            a_ns: times[0].mean_ns,
            b_ns: 0.0,
        }
    } else {
        fit_affine(&times).ok_or_else(|| {
            BadInput(format!(
                "{source}: Triton's statistics of model {:?} hold no batch",
                stats.name
            ))
        })?
    };
    Ok(fit_batch_means(
        scenario,
        &sizes,
        PaddedLine {
            a_ns: line.a_ns,
            b_ns: line.b_ns,
            ..PaddedLine::default()
        },
        &[],
        overhead_ns,
    )
    .map_err(|e| BadInput(e.to_string()))?)
}
