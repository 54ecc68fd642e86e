// Over 800 lines: the review's blocks and their two renderings (Markdown, HTML) are one document; 200 of them are its tests.
//! The capacity review: `report.md` and a self-contained `report.html` that open with the
//! question (trace, rate, peak, SLO, growth) and the answer (configuration, instances, headroom,
//! cost), then the evidence (figures and the ranked capacities), then what the answer rests on
//! (where the service times came from, the assumed overheads, seeds, intervals, and the answer
//! with service times 20% slower).
//!
//! The answer is the rule `capsim plan` applies: of the configurations whose capacity (the low
//! end of its 95% interval) carries the trace replayed at `growth` times its rate, the one with
//! the fewest instances, then the largest capacity. [`Review`] holds what a sweep's rows do not:
//! the trace's figures, the growth, the scenario's provenance and the sensitivity run; a sweep
//! stores it in `sweep.json` so that `capsim report` redraws the same documents.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use capsim_sim::Scenario;

pub use crate::basis::{Basis, Question, Review, Sensitivity, ServiceSource};

use crate::basis::trim;
use crate::error::ReportError;
use crate::experiment::{Workload, configure};
use crate::grid::{Configuration, Grid};
use crate::interval::Estimate;
use crate::shard::Shard;
use crate::slo::Slo;
use crate::sweep::{CapacityRow, SweepError, SweepResult, SweepSpec, run_sweep};

/// How much slower the sensitivity run's service times are (1.2: 20% slower).
pub const SLOWER_SERVICE_FACTOR: f64 = 1.2;

/// `scenario` with every pool's batch execution and LLM step GPU times multiplied by `factor`
/// (its `execution.time_scale` times `factor`): any service model, calibrated profiles and
/// rooflines included. The scenario refuses a product outside (0, 1000].
pub fn slower_service(scenario: &Scenario, factor: f64) -> Result<Scenario, String> {
    let mut scaled = scenario.clone();
    for pool in scenario.pools() {
        let path = if pool.name == "default" {
            "execution.time_scale".to_string()
        } else {
            format!("pools.{}.execution.time_scale", pool.name)
        };
        let scale = pool.execution.time_scale * factor;
        scaled
            .set(&path, &format!("{scale}"))
            .map_err(|e| e.to_string())?;
    }
    Ok(scaled)
}

/// Configurations that carry the trace at `growth` times its mean rate `mean_rps` (the low end
/// of their capacity interval), fewest instances first, then by capacity.
pub fn carrying(capacities: &[CapacityRow], mean_rps: f64, growth: f64) -> Vec<&CapacityRow> {
    let mut rows: Vec<&CapacityRow> = capacities
        .iter()
        .filter(|r| carried_multiple(r, mean_rps) >= growth)
        .collect();
    rows.sort_by(|a, b| {
        a.instances
            .cmp(&b.instances)
            .then(carried_multiple(b, mean_rps).total_cmp(&carried_multiple(a, mean_rps)))
            .then(a.config_index.cmp(&b.config_index))
    });
    rows
}

/// The multiple of the trace's rate `row` carries: its capacity interval's low end over
/// `mean_rps` (0 without a capacity or a rate).
pub fn carried_multiple(row: &CapacityRow, mean_rps: f64) -> f64 {
    match row.capacity_rps {
        Some(c) if mean_rps > 0.0 => c.low / mean_rps,
        _ => 0.0,
    }
}

/// The configuration that carries the largest multiple of the trace's mean rate `mean_rps`:
/// the one the answer names when none carries the growth.
pub fn most_carrying(capacities: &[CapacityRow], mean_rps: f64) -> Option<&CapacityRow> {
    capacities
        .iter()
        .max_by(|a, b| carried_multiple(a, mean_rps).total_cmp(&carried_multiple(b, mean_rps)))
}

/// The configuration the answer names: the first that [`carrying`] returns for the trace's
/// `mean_rps` and `growth`, else the best ranked; `None` without capacities.
pub fn answering_row(result: &SweepResult, mean_rps: f64, growth: f64) -> Option<&CapacityRow> {
    carrying(&result.capacities, mean_rps, growth)
        .first()
        .copied()
        .or_else(|| crate::sweep::ranked(result).first().copied())
}

/// The sensitivity run of a finished sweep: the configuration that answers ([`answering_row`])
/// again with every service time [`SLOWER_SERVICE_FACTOR`] times as long. `None` for a shard
/// (see [`shard_sensitivities`]) or an interrupted sweep (no answer yet) and for a sweep without
/// capacities.
pub fn sensitivity_of(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    result: &SweepResult,
    mean_rps: f64,
    growth: f64,
) -> Result<Option<Sensitivity>, SweepError> {
    if spec.shard != Shard::WHOLE || !result.complete {
        return Ok(None);
    }
    answering_row(result, mean_rps, growth)
        .map(|row| slower_capacity(spec, workload, row))
        .transpose()
}

/// A shard's part of the sensitivity run: no shard knows which configuration will answer, so
/// each runs [`slower_capacity`] for every configuration it ran, and `capsim merge`
/// ([`crate::output::merge`]) keeps the answer's. Its searches are the very ones an unsharded
/// sweep makes for that configuration (same seeds, same search), so the merged report equals the
/// unsharded one. Empty for a whole or interrupted sweep.
pub fn shard_sensitivities(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    result: &SweepResult,
) -> Result<Vec<Sensitivity>, SweepError> {
    if spec.shard == Shard::WHOLE || !result.complete {
        return Ok(Vec::new());
    }
    result
        .capacities
        .iter()
        .map(|row| slower_capacity(spec, workload, row))
        .collect()
}

/// What `report.md` states beyond a finished sweep's runs: the trace's figures (`trace` names
/// it) and the `growth` to plan for, the provenance of the scenario read from `scenario_path`,
/// and the answer's configuration (else the best-ranked) run again with slower service times
/// ([`sensitivity_of`]). A sharded run has no answer yet: its part of the sensitivity run is
/// [`shard_sensitivities`], which the merge reads.
pub fn review_of(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    result: &SweepResult,
    trace: String,
    scenario_path: &Path,
    growth: f64,
) -> Result<Review, SweepError> {
    let summary = capsim_trace::Summary::of(workload.trace);
    let question = Question::of(trace, &summary, growth);
    let basis = Basis::of(
        &spec.base,
        scenario_path,
        spec.seeds,
        spec.base_seed,
        spec.max_lost_fraction,
    );
    let sensitivity = sensitivity_of(spec, workload, result, question.mean_rate_rps, growth)?;
    Ok(Review {
        question,
        basis,
        sensitivity,
    })
}

/// Sets `result`'s review ([`review_of`]) and a shard's part of the sensitivity run
/// ([`shard_sensitivities`]), as `capsim sweep` records them in `sweep.json`. Leaves both unset
/// for a trace without a mean rate (fewer than two requests, or no span): the review's question
/// is a multiple of that rate.
pub fn review_sweep(
    result: &mut SweepResult,
    spec: &SweepSpec,
    workload: &Workload<'_>,
    trace: String,
    scenario_path: &Path,
    growth: f64,
) -> Result<(), SweepError> {
    if workload.trace_rate_rps.is_some() {
        result.review = Some(review_of(
            spec,
            workload,
            result,
            trace,
            scenario_path,
            growth,
        )?);
        result.shard_sensitivities = shard_sensitivities(spec, workload, result)?;
    }
    Ok(())
}

/// The capacity of `row`'s configuration with every service time scaled by
/// [`SLOWER_SERVICE_FACTOR`], by one capacity search per seed of `spec`; or, in its `note`, why
/// its service times cannot be scaled.
pub fn slower_capacity(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    row: &CapacityRow,
) -> Result<Sensitivity, SweepError> {
    let configuration = Configuration {
        settings: row.settings.clone(),
    };
    let mut sensitivity = Sensitivity {
        service_scale: SLOWER_SERVICE_FACTOR,
        configuration: row.configuration.clone(),
        capacity_rps: None,
        note: None,
    };
    let configured = configure(&spec.base, &configuration)?;
    let slower = match slower_service(&configured, SLOWER_SERVICE_FACTOR) {
        Ok(s) => s,
        Err(note) => {
            sensitivity.note = Some(note);
            return Ok(sensitivity);
        }
    };
    let one = SweepSpec {
        base: slower,
        grid: Grid::new(Vec::new()).map_err(|e| SweepError::Spec(e.to_string()))?,
        curves: false,
        shard: Shard::WHOLE,
        ..spec.clone()
    };
    let never = AtomicBool::new(false);
    let result = run_sweep(&one, workload, &|| {}, &never)?;
    sensitivity.capacity_rps = result.capacities.first().and_then(|c| c.capacity_rps);
    Ok(sensitivity)
}

/// The planner's answer in one sentence: the configuration that carries the growth with the
/// fewest instances, its headroom, the sensitivity and what it rests on; or, when none does, the
/// best the grid reached.
pub fn answer_sentence(result: &SweepResult, review: &Review) -> String {
    let q = &review.question;
    let slo = &result.slo;
    let target = q.mean_rate_rps * q.growth;
    let growth = trim(q.growth);
    let Some(best) = carrying(&result.capacities, q.mean_rate_rps, q.growth)
        .first()
        .copied()
    else {
        return match most_carrying(&result.capacities, q.mean_rate_rps) {
            Some(row) => format!(
                "No configuration of the grid carries {growth}x the trace ({target:.0} req/s) under {slo}: the best, `{}`, carries {:.2}x (its curve ends by {}){}, resting on {}.",
                row.configuration,
                carried_multiple(row, q.mean_rate_rps),
                ends_by(row),
                widen_hint(row),
                rests_on(&review.basis)
            ),
            None => {
                format!("No configuration of the grid carries {growth}x the trace under {slo}.")
            }
        };
    };
    let multiple = carried_multiple(best, q.mean_rate_rps);
    let capacity = best.capacity_rps.unwrap_or(Estimate {
        mean: 0.0,
        low: 0.0,
        high: 0.0,
        samples: 0,
    });
    let interval = quoted_capacity(&capacity);
    let cost = best.cost_per_million_requests.map_or(String::new(), |c| {
        format!(" at {c:.4} per million requests,")
    });
    let slower = review
        .sensitivity
        .as_ref()
        .map_or(String::new(), |s| slower_clause(s, &capacity, q));
    format!(
        "Answer: for {growth}x today's traffic ({target:.0} req/s mean, {:.0} req/s at the 60 s peak) under {slo}, run `{}` ({} instance{}), which carries {multiple:.2}x the trace ({interval}), headroom {:+.0}% over the target{slower},{cost} resting on {}.",
        q.peak_rate_60s_rps * q.growth,
        best.configuration,
        best.instances,
        if best.instances == 1 { "" } else { "s" },
        (multiple / q.growth - 1.0) * 100.0,
        rests_on(&review.basis)
    )
}

/// The capacity as the answer quotes it: the low end of its 95% interval (what the decision
/// rests on, and what the quoted multiple is of), with the interval and the mean beside it.
fn quoted_capacity(capacity: &Estimate) -> String {
    if capacity.samples > 1 {
        format!(
            "{:.0} req/s, the low end of its 95% interval {:.0}–{:.0} over {} seeds, mean {:.0}",
            capacity.low, capacity.low, capacity.high, capacity.samples, capacity.mean
        )
    } else {
        format!("{:.0} req/s, one seed", capacity.low)
    }
}

/// The sensitivity in the answer, on the same statistic as the answer (the interval's low end):
/// the multiple the slower service carries and its headroom when it is lower than `base`; when it
/// is not, that the difference is within the search's noise (slower service cannot carry more).
fn slower_clause(sensitivity: &Sensitivity, base: &Estimate, q: &Question) -> String {
    let Some(slow) = sensitivity.capacity_rps else {
        return String::new();
    };
    let percent = (sensitivity.service_scale - 1.0) * 100.0;
    if slow.low >= base.low {
        return format!(
            " (with service times {percent:.0}% slower the search finds no lower capacity, {:.0} against {:.0} req/s: a difference within the search's noise, its 1% resolution and the seeds' spread, not a gain)",
            slow.low, base.low
        );
    }
    let m = if q.mean_rate_rps > 0.0 {
        slow.low / q.mean_rate_rps
    } else {
        0.0
    };
    format!(
        " (with service times {percent:.0}% slower it carries {m:.2}x, {:.0} req/s, {})",
        slow.low,
        if m >= q.growth {
            format!("headroom {:+.0}%", (m / q.growth - 1.0) * 100.0)
        } else {
            "short of the target".to_string()
        }
    )
}

/// What the answer rests on, in a few words.
fn rests_on(basis: &Basis) -> String {
    match basis.service_source {
        ServiceSource::Unmeasured => {
            "UNMEASURED service times (the scenario's own model, not a measurement: calibrate before committing)".to_string()
        }
        ServiceSource::Fitted => "service times fitted by `capsim fit` to a measured log".to_string(),
        ServiceSource::Calibrated => format!("measured service times ({})", basis.service),
    }
}

/// One block of the review, rendered to Markdown and to HTML alike. Text may hold `code` and
/// **bold** spans.
enum Block {
    Heading(u8, String),
    Para(String),
    Warning(String),
    List(Vec<String>),
    Table {
        head: Vec<String>,
        right: Vec<bool>,
        rows: Vec<Vec<String>>,
    },
    Figure {
        file: String,
        caption: String,
    },
}

/// What one figure shows, by its file name (the sweep writes them; an unknown name gets none).
fn caption_of(file: &str) -> &'static str {
    match file {
        "throughput_latency.png" => {
            "Latency against load, one panel per configuration, with the SLO and the capacity marked."
        }
        "p99_by_config.png" => {
            "The SLO's percentile of every configuration in one panel, each line ending at its capacity."
        }
        "latency_cdf.png" => "End-to-end latency distribution at the detail load.",
        "stage_breakdown.png" => {
            "Where the time goes, stage by stage, at the highest load every configuration shown sustains."
        }
        "timeseries.png" => {
            "Queue depth, batch size and utilization over the best configuration's detail run."
        }
        "capacity_heatmap.png" => "Capacity over the first two grid axes.",
        _ => "",
    }
}

/// The blocks of the review: the title, then its four sections.
fn blocks(
    result: &SweepResult,
    slo: &Slo,
    ranking: &[&CapacityRow],
    figures: &[String],
) -> Vec<Block> {
    let mut out = title_blocks(result);
    out.extend(question_blocks(result, slo));
    out.extend(answer_blocks(result, ranking));
    out.extend(evidence_blocks(result, ranking, figures));
    out.extend(basis_blocks(result, ranking));
    out
}

/// The title (the scenario and the trace, when the sweep recorded them) and, for an interrupted
/// sweep, the warning that only finished runs are reported.
fn title_blocks(result: &SweepResult) -> Vec<Block> {
    let mut out = Vec::new();
    let review = result.review.as_ref();
    let title = review.map_or("Capacity review".to_string(), |r| {
        format!(
            "Capacity review: {} on {}",
            r.basis
                .scenario
                .rsplit('/')
                .next()
                .unwrap_or(&r.basis.scenario),
            r.question
                .trace
                .rsplit('/')
                .next()
                .unwrap_or(&r.question.trace)
        )
    });
    out.push(Block::Heading(1, title));
    if !result.complete {
        out.push(Block::Warning(
            "The sweep was interrupted: only the runs that finished are reported.".to_string(),
        ));
    }
    out
}

/// The question: the traffic, the growth, the serving setup, the objective and the options.
fn question_blocks(result: &SweepResult, slo: &Slo) -> Vec<Block> {
    let review = result.review.as_ref();
    let mut question = Vec::new();
    if let Some(r) = review {
        let q = &r.question;
        question.push(format!(
            "Traffic: `{}`, {} requests over {}; mean {:.1} req/s, peak {:.1} req/s over 60 s and {:.0} req/s in 1 s; inputs mean {:.0}, p99 {:.0} tokens.",
            q.trace,
            q.requests,
            duration_words(q.span_s),
            q.mean_rate_rps,
            q.peak_rate_60s_rps,
            q.peak_rate_1s_rps,
            q.input_tokens_mean,
            q.input_tokens_p99
        ));
        question.push(format!(
            "Growth: {}x, i.e. the trace replayed at {:.1} req/s mean ({:.1} req/s at its 60 s peak).",
            trim(q.growth),
            q.mean_rate_rps * q.growth,
            q.peak_rate_60s_rps * q.growth
        ));
        if let Some(d) = &r.basis.description {
            question.push(format!("Serving: `{}`: {d}.", r.basis.scenario));
        }
    }
    question.push(format!(
        "Objective: `{slo}`, with at most {} of requests rejected or timed out and no growing queue.",
        review.map_or("the stated fraction".to_string(), |r| percent(r.basis.max_lost_fraction))
    ));
    question.push(format!(
        "Options: {}.",
        result
            .grid_keys
            .iter()
            .zip(&result.grid_values)
            .map(|(k, v)| format!("`{k}` ∈ {{{}}}", v.join(", ")))
            .collect::<Vec<_>>()
            .join(" × ")
    ));
    vec![
        Block::Heading(2, "Question".to_string()),
        Block::List(question),
    ]
}

/// The answer, and the warning when the service times it rests on were not measured.
fn answer_blocks(result: &SweepResult, ranking: &[&CapacityRow]) -> Vec<Block> {
    let review = result.review.as_ref();
    let mut out = vec![Block::Heading(2, "Answer".to_string())];
    match review {
        Some(r) => out.push(Block::Para(format!("**{}**", answer_sentence(result, r)))),
        None => out.push(Block::Para(format!(
            "The best configuration by capacity per instance is `{}`. (This sweep.json has no record of the trace and growth; run `capsim sweep` again for the full answer.)",
            ranking[0].configuration
        ))),
    }
    if let Some(r) = review
        && r.basis.service_source == ServiceSource::Unmeasured
    {
        out.push(Block::Warning(format!(
            "These service times were NOT MEASURED: they are a guess written in the scenario ({}). The capacities below are only as good as that guess; measure the model with `capsim calibrate` (or fit a measured log with `capsim fit`) before committing to the answer.",
            r.basis.service
        )));
    }
    out
}

/// The evidence: the figures, then the capacity of every configuration (its definitions, the
/// table and the notes the table needs).
fn evidence_blocks(
    result: &SweepResult,
    ranking: &[&CapacityRow],
    figures: &[String],
) -> Vec<Block> {
    let mut out = vec![Block::Heading(2, "Evidence".to_string())];
    for file in figures {
        out.push(Block::Figure {
            file: file.clone(),
            caption: caption_of(file).to_string(),
        });
    }
    out.push(Block::Heading(
        3,
        "Capacity of every configuration".to_string(),
    ));
    out.push(Block::List(vec![
        "**Capacity** (the answer's measure): the highest rate at which the SLO holds, losses stay within the bound, the queue does not grow and the achieved throughput stays within 10% of the offered rate, found per seed by one search that `sweep` and `plan` share (doubling or halving from the trace's own rate, then bisection to 1%): the highest load it found sustainable below the lowest it found unsustainable; the interval is a 95% Student-t interval across seeds. **Ends by** is what failed at that lowest unsustainable load, over the seeds.".to_string(),
        "**Latency starts to climb** (Kneedle's knee of the SLO percentile against load): where the curve bends upward, a load to stay below for comfort; shown only where it lies at or below the capacity, – where Kneedle finds no bend.".to_string(),
    ]));
    let (table, past_capacity) = capacity_table(ranking);
    out.push(table);
    let notes = capacity_notes(result, ranking, &past_capacity);
    if !notes.is_empty() {
        out.push(Block::List(notes));
    }
    out
}

/// The ranked capacity table, and the configurations whose Kneedle knee lies past their capacity
/// (their knee is not shown; a note says why).
fn capacity_table(ranking: &[&CapacityRow]) -> (Block, Vec<String>) {
    let mut rows = Vec::new();
    let mut past_capacity = Vec::new();
    for (rank, row) in ranking.iter().enumerate() {
        let above = row
            .bracket_by_seed
            .contains(&crate::capacity::Bracket::AboveRange);
        let capacity = row.capacity_rps.map(|c| c.mean);
        let knee = match (row.kneedle_knee, capacity) {
            (Some(k), Some(c)) if k.throughput_rps <= c * 1.0001 => {
                format!("{:.1}", k.throughput_rps)
            }
            (Some(k), _) => {
                past_capacity.push(format!(
                    "`{}` ({:.1} req/s against a capacity of {})",
                    row.configuration,
                    k.throughput_rps,
                    capacity.map_or("none".to_string(), |c| format!("{c:.1}"))
                ));
                "past capacity".to_string()
            }
            (None, _) => "–".to_string(),
        };
        rows.push(vec![
            (rank + 1).to_string(),
            format!("`{}`", row.configuration),
            row.instances.to_string(),
            format!("{}{}", if above { "≥ " } else { "" }, number(capacity)),
            row.capacity_rps.map_or("–".to_string(), |c| {
                format!("{:.1} – {:.1}", c.low, c.high)
            }),
            ends_by(row),
            number(row.capacity_per_instance_rps),
            number(row.latency_at_capacity_ms),
            knee,
            row.cost_per_million_requests
                .map_or("–".to_string(), |c| format!("{c:.4}")),
        ]);
    }
    let table = Block::Table {
        head: [
            "rank",
            "configuration",
            "instances",
            "capacity (req/s)",
            "95% interval",
            "ends by",
            "per instance (req/s)",
            "SLO percentile at capacity (ms, the search's runs)",
            "latency starts to climb (req/s)",
            "cost / 1M req",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        right: vec![
            true, false, true, true, false, false, true, true, true, true,
        ],
        rows,
    };
    (table, past_capacity)
}

/// The notes under the capacity table: lower bounds, knees past capacity (`past_capacity`), and
/// how the capacity scales with instances.
fn capacity_notes(
    result: &SweepResult,
    ranking: &[&CapacityRow],
    past_capacity: &[String],
) -> Vec<String> {
    let mut notes = Vec::new();
    if ranking.iter().any(|r| {
        r.bracket_by_seed
            .contains(&crate::capacity::Bracket::AboveRange)
    }) {
        notes.push("A capacity marked ≥ met the SLO at the top of the load axis: it is a lower bound; extend the axis to find it.".to_string());
    }
    if !past_capacity.is_empty() {
        notes.push(format!(
            "Kneedle's knee lies past the capacity for {}: there the queue already grows, so the bend it finds is the overload's, not where latency starts to climb; it is not shown.",
            past_capacity.join(", ")
        ));
    }
    if let Some(note) = scaling_note(result) {
        notes.push(note);
    }
    notes
}

/// What the answer rests on: the service times' source, the overheads, the seeds, the
/// sensitivity (when the sweep recorded them) and the runs.
fn basis_blocks(result: &SweepResult, ranking: &[&CapacityRow]) -> Vec<Block> {
    let mut basis = Vec::new();
    if let Some(r) = result.review.as_ref() {
        let b = &r.basis;
        let source = match b.service_source {
            ServiceSource::Unmeasured => "**UNMEASURED: a guess written in the scenario**",
            ServiceSource::Fitted => {
                "fitted by `capsim fit` to a measured log (see the fit's report for its error)"
            }
            ServiceSource::Calibrated => "measured by `capsim calibrate`",
        };
        basis.push(format!("Service times: {source}; {}.", b.service));
        basis.push(format!(
            "Assumed overheads outside the model (not measured unless the scenario says so): {}.",
            if b.overheads.is_empty() {
                "none set".to_string()
            } else {
                b.overheads
                    .iter()
                    .map(|o| format!("`{o}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
        basis.push(format!(
            "Seeds: {} per point (seed {} to {}); capacities are the mean with a 95% Student-t interval across them{}.",
            b.seeds,
            b.base_seed,
            b.base_seed + u64::from(b.seeds.max(1)) - 1,
            if b.seeds < 2 { " (one seed: no interval; use --seeds 3 or more)" } else { "" }
        ));
        if b.service_source != ServiceSource::Calibrated && !b.service.contains("residuals") {
            basis.push("The service model is deterministic and the trace fixes the arrivals, so seeds vary only the sampled overheads (network latency): the interval is narrow and does not cover the service-time uncertainty; the sensitivity below does.".to_string());
        }
        basis.push(sensitivity_line(r.sensitivity.as_ref(), ranking));
    }
    basis.push(format!(
        "Runs: {} configurations × {} curve runs on the `{}` load axis.",
        ranking.len(),
        result.curves.len(),
        result.load_kind.column()
    ));
    vec![
        Block::Heading(2, "What the answer rests on".to_string()),
        Block::List(basis),
    ]
}

/// The sensitivity item of the basis: the capacity with slower service times against the one
/// simulated, or why it was not computed.
fn sensitivity_line(sensitivity: Option<&Sensitivity>, ranking: &[&CapacityRow]) -> String {
    let Some(s) = sensitivity else {
        return "Sensitivity to slower service times: not computed (a shard, or an interrupted or incomplete merge: no answer yet).".to_string();
    };
    let Some(slow) = s.capacity_rps else {
        return format!(
            "Sensitivity to {:.0}% slower service times: not computed ({}).",
            (s.service_scale - 1.0) * 100.0,
            s.note.as_deref().unwrap_or("no reason recorded")
        );
    };
    let base = ranking
        .iter()
        .find(|row| row.configuration == s.configuration)
        .and_then(|row| row.capacity_rps);
    let change = base.filter(|b| b.low > 0.0).map_or(String::new(), |b| {
        if slow.low >= b.low {
            format!(
                " against {:.1} req/s as simulated: not lower, so the difference is within the search's noise (1% resolution, the seeds' spread), not a gain",
                b.low
            )
        } else {
            format!(
                " against {:.1} req/s as simulated ({:+.0}%)",
                b.low,
                (slow.low / b.low - 1.0) * 100.0
            )
        }
    });
    format!(
        "Sensitivity: with every service time {:.0}% slower, `{}` sustains {:.1} req/s at the low end of its 95% interval ({:.1} – {:.1}, mean {:.1}){change}.",
        (s.service_scale - 1.0) * 100.0,
        s.configuration,
        slow.low,
        slow.low,
        slow.high,
        slow.mean
    )
}

/// What to do when no configuration carries the growth: widen the grid, unless the best one's
/// runs fell behind their offered rate, which a trace too short for its requests' lifetimes
/// does at every load as well as an overload.
fn widen_hint(row: &CapacityRow) -> &'static str {
    if row
        .limited_by()
        .contains(&crate::capacity::Limit::AchievedBelowOffered)
    {
        ", so either widen the grid or, if its requests live long against the trace's span, replay a longer trace (completions fell more than 10% behind arrivals)"
    } else {
        ", so widen the grid (more instances or other batching)"
    }
}

/// What ended `row`'s curve, in words (`SLO crossed, queue grows`); `–` when nothing did (the
/// capacity is above the searched range).
fn ends_by(row: &CapacityRow) -> String {
    let limits = row.limited_by();
    if limits.is_empty() {
        return "–".to_string();
    }
    limits
        .iter()
        .map(|l| l.words())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A line saying why capacity grows faster than the instance count, when it does by more than
/// 10% per instance between the fewest and the most instances of otherwise equal settings.
fn scaling_note(result: &SweepResult) -> Option<String> {
    let others = |row: &CapacityRow| -> Vec<(String, String)> {
        row.settings
            .iter()
            .filter(|(k, _)| k != "instances")
            .cloned()
            .collect()
    };
    let mut worst: Option<(f64, &CapacityRow, &CapacityRow)> = None;
    for low in &result.capacities {
        for high in &result.capacities {
            if high.instances <= low.instances || others(low) != others(high) {
                continue;
            }
            let (Some(a), Some(b)) = (
                low.capacity_per_instance_rps,
                high.capacity_per_instance_rps,
            ) else {
                continue;
            };
            if a > 0.0 && b / a > 1.1 && worst.is_none_or(|w| b / a > w.0) {
                worst = Some((b / a, low, high));
            }
        }
    }
    let (ratio, low, high) = worst?;
    Some(format!(
        "Capacity grows faster than the instance count: `{}` sustains {:.1} req/s per instance, `{}` {:.1} ({:.2}x). At a higher total rate the arrivals in any window of the SLO's length vary less relative to their mean, and more servers share each burst, so under the same percentile bound each server can run busier (a multi-server queue's economy of scale); the per-instance figure of the smallest fleet is the conservative one.",
        low.configuration,
        low.capacity_per_instance_rps.unwrap_or(0.0),
        high.configuration,
        high.capacity_per_instance_rps.unwrap_or(0.0),
        ratio
    ))
}

/// Writes `report.md` and `report.html` into `dir` (figures by file name; the HTML embeds them)
/// and returns their paths.
pub fn write_documents(
    dir: &Path,
    result: &SweepResult,
    slo: &Slo,
    ranking: &[&CapacityRow],
    figures: &[PathBuf],
) -> Result<Vec<PathBuf>, ReportError> {
    let names: Vec<String> = figures
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .filter(|n| n.ends_with(".png"))
        .collect();
    let blocks = blocks(result, slo, ranking, &names);
    let md_path = dir.join("report.md");
    write(&md_path, &markdown(&blocks))?;
    let html_path = dir.join("report.html");
    write(&html_path, &html(&blocks, dir)?)?;
    Ok(vec![md_path, html_path])
}

fn write(path: &Path, text: &str) -> Result<(), ReportError> {
    std::fs::write(path, text).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn markdown(blocks: &[Block]) -> String {
    let mut md = String::new();
    for block in blocks {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(md, "{} {text}\n", "#".repeat(usize::from(*level)));
            }
            Block::Para(text) => {
                let _ = writeln!(md, "{text}\n");
            }
            Block::Warning(text) => {
                let _ = writeln!(md, "> **⚠ {text}**\n");
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(md, "- {item}");
                }
                md.push('\n');
            }
            Block::Table { head, right, rows } => {
                let _ = writeln!(md, "| {} |", head.join(" | "));
                let rule: Vec<&str> = right
                    .iter()
                    .map(|r| if *r { "---:" } else { "---" })
                    .collect();
                let _ = writeln!(md, "|{}|", rule.join("|"));
                for row in rows {
                    let _ = writeln!(md, "| {} |", row.join(" | "));
                }
                md.push('\n');
            }
            Block::Figure { file, caption } => {
                let _ = writeln!(md, "![{file}]({file})\n");
                if !caption.is_empty() {
                    let _ = writeln!(md, "*{file}*: {caption}\n");
                }
            }
        }
    }
    md
}

const STYLE: &str = "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#1b1f24;line-height:1.45}\
h1{font-size:1.7em;border-bottom:2px solid #d0d7de;padding-bottom:.3em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de}\
code{background:#f2f4f7;padding:.1em .3em;border-radius:3px;font-size:.92em}\
.warn{background:#fff4e5;border-left:6px solid #d9480f;padding:.6em 1em;font-weight:600}\
table{border-collapse:collapse;font-size:.9em}th,td{border:1px solid #d0d7de;padding:.3em .6em}th{background:#f6f8fa}td.r,th.r{text-align:right}\
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #d0d7de}figcaption{color:#57606a;font-size:.9em}";

fn html(blocks: &[Block], dir: &Path) -> Result<String, ReportError> {
    let title = blocks
        .iter()
        .find_map(|b| match b {
            Block::Heading(1, t) => Some(t.as_str()),
            _ => None,
        })
        .unwrap_or("capsim report");
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(title)
    );
    for block in blocks {
        match block {
            Block::Heading(level, text) => {
                let _ = writeln!(out, "<h{level}>{}</h{level}>", inline(text));
            }
            Block::Para(text) => {
                let _ = writeln!(out, "<p>{}</p>", inline(text));
            }
            Block::Warning(text) => {
                let _ = writeln!(out, "<p class=\"warn\">⚠ {}</p>", inline(text));
            }
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    let _ = writeln!(out, "<li>{}</li>", inline(item));
                }
                out.push_str("</ul>\n");
            }
            Block::Table { head, right, rows } => {
                let class = |i: usize| {
                    if right.get(i) == Some(&true) {
                        " class=\"r\""
                    } else {
                        ""
                    }
                };
                out.push_str("<table>\n<tr>");
                for (i, h) in head.iter().enumerate() {
                    let _ = write!(out, "<th{}>{}</th>", class(i), inline(h));
                }
                out.push_str("</tr>\n");
                for row in rows {
                    out.push_str("<tr>");
                    for (i, cell) in row.iter().enumerate() {
                        let _ = write!(out, "<td{}>{}</td>", class(i), inline(cell));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</table>\n");
            }
            Block::Figure { file, caption } => {
                let path = dir.join(file);
                let bytes = std::fs::read(&path).map_err(|source| ReportError::Io {
                    path: path.clone(),
                    source,
                })?;
                let _ = writeln!(
                    out,
                    "<figure><img alt=\"{}\" src=\"data:image/png;base64,{}\"><figcaption><code>{}</code>: {}</figcaption></figure>",
                    escape(file),
                    base64(&bytes),
                    escape(file),
                    inline(caption)
                );
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `text` escaped, with `code` and **bold** spans turned into their HTML elements.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut bold = false;
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('`')
            && let Some(end) = after.find('`')
        {
            let _ = write!(out, "<code>{}</code>", escape(&after[..end]));
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = after;
        } else {
            let first = rest.chars().next().map_or(1, char::len_utf8);
            let next = rest[first..]
                .find(['`', '*'])
                .map_or(rest.len(), |i| i + first);
            out.push_str(&escape(&rest[..next]));
            rest = &rest[next..];
        }
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

/// Standard base64 (RFC 4648, with padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn number(value: Option<f64>) -> String {
    value.map_or("–".to_string(), |v| format!("{v:.1}"))
}

fn percent(fraction: f64) -> String {
    format!("{}%", trim(fraction * 100.0))
}

fn duration_words(seconds: f64) -> String {
    if seconds >= 120.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{} s", trim(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_test_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "base64({input:?})");
        }
    }

    #[test]
    fn inline_markup_becomes_code_and_strong_and_is_escaped() {
        assert_eq!(
            inline("**run `a<b` now** & 1*2"),
            "<strong>run <code>a&lt;b</code> now</strong> &amp; 1*2"
        );
    }

    fn row(index: usize, instances: u32, capacity_rps: f64, knee_rps: Option<f64>) -> CapacityRow {
        let estimate = Estimate {
            mean: capacity_rps,
            low: capacity_rps * 0.98,
            high: capacity_rps * 1.02,
            samples: 3,
        };
        CapacityRow {
            config_index: index,
            configuration: format!("instances={instances}"),
            settings: vec![("instances".to_string(), instances.to_string())],
            instances,
            capacity_rps_by_seed: vec![capacity_rps; 3],
            bracket_by_seed: vec![crate::capacity::Bracket::Found; 3],
            limited_by_by_seed: vec![vec![crate::capacity::Limit::Slo]; 3],
            capacity_rps: Some(estimate),
            capacity_per_instance_rps: Some(capacity_rps / f64::from(instances)),
            latency_at_capacity_ms: Some(90.0),
            slo_knee: None,
            kneedle_knee: knee_rps.map(|k| crate::sweep::KneePoint {
                load: 1.0,
                throughput_rps: k,
                latency_ms: 50.0,
            }),
            knee_warnings: Vec::new(),
            cost_per_million_requests: None,
        }
    }

    fn result(capacities: Vec<CapacityRow>, growth: f64) -> SweepResult {
        SweepResult {
            slo: "e2e.p99<=100ms".to_string(),
            load_kind: crate::load::LoadKind::RateScale,
            grid_keys: vec!["instances".to_string()],
            grid_values: vec![vec!["1".to_string(), "2".to_string(), "4".to_string()]],
            shard: crate::shard::Shard::WHOLE,
            complete: true,
            curves: Vec::new(),
            capacities,
            details: Vec::new(),
            review: Some(Review {
                question: Question {
                    trace: "t.parquet".to_string(),
                    requests: 1000,
                    span_s: 100.0,
                    mean_rate_rps: 100.0,
                    peak_rate_1s_rps: 160.0,
                    peak_rate_60s_rps: 110.0,
                    input_tokens_mean: 80.0,
                    input_tokens_p99: 400.0,
                    growth,
                },
                basis: Basis {
                    scenario: "s.toml".to_string(),
                    description: None,
                    service_source: ServiceSource::Unmeasured,
                    service: "affine".to_string(),
                    overheads: Vec::new(),
                    seeds: 3,
                    base_seed: 0,
                    max_lost_fraction: 0.001,
                },
                sensitivity: None,
            }),
            shard_sensitivities: Vec::new(),
        }
    }

    #[test]
    fn answer_names_the_fewest_instances_whose_interval_carries_the_growth() {
        // 1 instance carries 3.43x (low end), 2 carry 7.84x: for 4x the answer is 2 instances,
        // headroom 7.84 / 4 - 1 = +96%.
        let r = result(
            vec![
                row(0, 1, 350.0, None),
                row(1, 2, 800.0, None),
                row(2, 4, 1900.0, None),
            ],
            4.0,
        );
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        for needle in [
            "run `instances=2` (2 instances)",
            "carries 7.84x",
            "headroom +96%",
            "UNMEASURED",
        ] {
            assert!(sentence.contains(needle), "{needle:?} not in {sentence:?}");
        }
        assert_eq!(
            sentence.matches(". ").count(),
            0,
            "one sentence: {sentence}"
        );
        let r = result(vec![row(0, 1, 350.0, None)], 4.0);
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        assert!(
            sentence.starts_with("No configuration of the grid carries 4x"),
            "{sentence}"
        );
        assert!(
            sentence.contains("(its curve ends by SLO crossed), so widen the grid"),
            "{sentence}"
        );
    }

    #[test]
    fn a_best_that_falls_behind_its_offered_rate_points_at_the_traces_length() {
        let mut behind = row(0, 1, 50.0, None);
        behind.limited_by_by_seed = vec![vec![crate::capacity::Limit::AchievedBelowOffered]; 3];
        let r = result(vec![behind], 3.0);
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        assert!(
            sentence.contains("ends by achieved < offered")
                && sentence.contains("replay a longer trace"),
            "{sentence}"
        );
    }

    /// The first number after `prefix` in `text`.
    fn number_after(text: &str, prefix: &str) -> f64 {
        let start = text
            .find(prefix)
            .unwrap_or_else(|| panic!("{prefix:?} not in {text:?}"))
            + prefix.len();
        let digits: String = text[start..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no number after {prefix:?} in {text:?}"))
    }

    #[test]
    fn the_quoted_multiple_times_the_trace_rate_is_the_quoted_rate() {
        // Mean 1933, interval 1609–2256: the answer rests on (and quotes) the low end.
        let mut best = row(0, 4, 1933.0, None);
        best.capacity_rps = Some(Estimate {
            mean: 1933.0,
            low: 1609.5,
            high: 2256.0,
            samples: 3,
        });
        let r = result(vec![best], 4.0);
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        let multiple = number_after(&sentence, "which carries ");
        let rate = number_after(&sentence, "x the trace (");
        let mean_rate = r.review.as_ref().unwrap().question.mean_rate_rps;
        assert!(
            (multiple * mean_rate - rate).abs() <= 0.005 * mean_rate + 0.5,
            "{multiple}x of {mean_rate} req/s is not the quoted {rate} req/s: {sentence}"
        );
        assert!(
            sentence.contains("mean 1933") && sentence.contains("1610–2256"),
            "{sentence}"
        );
    }

    fn with_sensitivity(slow: Estimate) -> SweepResult {
        let mut r = result(vec![row(0, 2, 800.0, None)], 4.0);
        r.review.as_mut().unwrap().sensitivity = Some(Sensitivity {
            service_scale: 1.2,
            configuration: "instances=2".to_string(),
            capacity_rps: Some(slow),
            note: None,
        });
        r
    }

    #[test]
    fn a_slower_service_that_lands_higher_is_reported_as_noise_not_as_carrying_more() {
        // The base carries 784 req/s at its low end; the slower search landed at 790 by noise.
        let r = with_sensitivity(Estimate {
            mean: 805.0,
            low: 790.0,
            high: 820.0,
            samples: 3,
        });
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        assert!(
            sentence.contains("slower the search finds no lower capacity")
                && sentence.contains("within the search's noise"),
            "{sentence}"
        );
        assert_eq!(sentence.matches("carries").count(), 1, "{sentence}");
        let md = markdown(&blocks(
            &r,
            &"e2e.p99<=100ms".parse().unwrap(),
            &crate::sweep::ranked(&r),
            &[],
        ));
        assert!(
            md.contains("not lower, so the difference is within"),
            "{md}"
        );
        assert!(!md.contains("(+"), "no gain shown as a percentage:\n{md}");
    }

    #[test]
    fn a_slower_service_that_carries_less_is_quoted_on_the_answers_statistic() {
        let r = with_sensitivity(Estimate {
            mean: 680.0,
            low: 650.0,
            high: 710.0,
            samples: 3,
        });
        let sentence = answer_sentence(&r, r.review.as_ref().unwrap());
        assert!(
            sentence.contains("slower it carries 6.50x, 650 req/s, headroom +62%"),
            "{sentence}"
        );
    }

    #[test]
    fn the_table_says_what_ends_each_curve() {
        let mut ended = row(0, 1, 350.0, None);
        ended.limited_by_by_seed = vec![
            vec![crate::capacity::Limit::Slo],
            vec![
                crate::capacity::Limit::Slo,
                crate::capacity::Limit::QueueGrowth,
            ],
            vec![],
        ];
        let r = result(vec![ended], 1.0);
        let md = markdown(&blocks(
            &r,
            &"e2e.p99<=100ms".parse().unwrap(),
            &crate::sweep::ranked(&r),
            &[],
        ));
        assert!(md.contains("| SLO crossed, queue grows |"), "{md}");
    }

    #[test]
    fn a_knee_past_capacity_is_not_shown_and_the_report_says_why() {
        let r = result(
            vec![row(0, 1, 350.0, Some(300.0)), row(1, 2, 800.0, Some(950.0))],
            1.0,
        );
        let ranking = crate::sweep::ranked(&r);
        let md = markdown(&blocks(
            &r,
            &"e2e.p99<=100ms".parse().unwrap(),
            &ranking,
            &[],
        ));
        assert!(
            md.contains("| 300.0 |"),
            "the knee below capacity is shown:\n{md}"
        );
        assert!(
            !md.contains("950.0 |"),
            "the knee past capacity is not in the table:\n{md}"
        );
        assert!(
            md.contains("Kneedle's knee lies past the capacity for `instances=2` (950.0 req/s against a capacity of 800.0)"),
            "{md}"
        );
        let order: Vec<usize> = [
            "## Question",
            "## Answer",
            "## Evidence",
            "## What the answer rests on",
        ]
        .iter()
        .map(|h| md.find(h).unwrap_or_else(|| panic!("{h} missing:\n{md}")))
        .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "sections out of order: {order:?}"
        );
    }

    #[test]
    fn slower_service_multiplies_every_pools_time_scale() {
        let s = Scenario::from_toml_str(
            "[service]\nkind = \"affine\"\na = \"1.5ms\"\nb = \"0.1ms\"\nc = \"6us\"\n\
             [pools.big]\nmodels = [\"big\"]\n[pools.big.execution]\ntime_scale = 2.0\n\
             [pools.big.service]\nkind = \"constant\"\ntime = \"5ms\"\n",
        )
        .unwrap();
        let slow = slower_service(&s, 1.2).unwrap();
        let scales: Vec<(String, f64)> = slow
            .pools()
            .iter()
            .map(|p| (p.name.clone(), p.execution.time_scale))
            .collect();
        assert_eq!(
            scales,
            [("default".to_string(), 1.2), ("big".to_string(), 2.4)],
            "each pool's scale times 1.2"
        );
        let shape = capsim_sim::BatchShape {
            size: 1,
            max_input_tokens: 0,
            total_input_tokens: 0,
            idle_ns: 0,
        };
        let built = capsim_sim::build::build(&slow, &mut capsim_sim::Profiles::default()).unwrap();
        let big = built.pools[1].service.as_ref().unwrap();
        assert!((big.mean_ns(&shape) - 12e6).abs() < 1e-3, "5 ms x 2 x 1.2");
    }
}
