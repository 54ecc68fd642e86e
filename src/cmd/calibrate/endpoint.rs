//! `capsim calibrate --endpoint URL --model NAME --scenario S.toml --trace T -o FITTED.toml`:
//! the served model measured through a running Triton (closed-loop runs, the server's own
//! statistics) into the scenario's `[service]` and `[postprocess]`, the client's path at light
//! load into `network.latency`, and the host CPU into `[host]` where the server runs here.

use std::path::Path;

use anyhow::{Context, Result};
use capsim_endpoint::batch_spread::SpreadPlan;
use capsim_endpoint::missed_release::{earlier_shares, pool_missed_release};
use capsim_endpoint::triton::ServerOverheads;
use capsim_endpoint::{
    EndpointOptions, OPEN_LOOP_MIN_REQUESTS, Protocol, ServerCalibration, WARMUP_REQUESTS,
    calibrate_through_server, default_concurrencies,
};
use capsim_sim::Scenario;
use capsim_trace::{IngestOptions, Transforms, read_trace};

use super::CalibrateArgs;
use crate::cmd::bad_input;
use crate::cmd::shared::triton_fit::fit_triton_stats;

/// Requests of each closed-loop run when --requests is not given.
pub const DEFAULT_REQUESTS: usize = 400;

/// Each open-loop run sends this many times the requests of a closed-loop run. Three times as
/// many in the 20% loop, which `batcher.missed_release` is fitted to, was tried on the
/// classifier (2026-12-07): paired on six runs at 30%, the p99 error went from 11.9% to 10.3%
/// on average and the share moved by at most 0.026, for 43 s more per calibration; the share
/// itself moves from one calibration to the next by more than its count's noise.
pub const OPEN_LOOP_TIMES: usize = 5;

/// Measures and fits; prints the fit and writes the fitted scenario to `-o`.
pub fn run(url: &str, args: &CalibrateArgs) -> Result<()> {
    let (Some(model), Some(scenario_path), Some(trace_path), Some(out)) =
        (&args.model, &args.scenario, &args.trace, &args.out)
    else {
        return Err(bad_input(
            "--endpoint needs the model's name on the server (--model), the scenario whose \
             batcher the server runs (--scenario), a trace whose request sizes to send (--trace) \
             and the fitted scenario to write (-o FITTED.toml)",
        ));
    };
    let scenario = Scenario::from_path(scenario_path).map_err(bad_input)?;
    // Checked before measuring: a file of another deployment fails now, not after the runs.
    let earlier = args
        .pool
        .iter()
        .map(|path| Ok((path.clone(), Scenario::from_path(path).map_err(bad_input)?)))
        .collect::<Result<Vec<_>>>()?;
    let earlier = earlier_shares(&scenario, &earlier).map_err(bad_input)?;
    let pool = &scenario.pools()[0];
    let concurrencies = if args.concurrency.is_empty() {
        default_concurrencies(pool.batcher.max_batch_size, pool.execution.instance_count)
    } else {
        args.concurrency.clone()
    };
    let (trace, _) = read_trace(std::slice::from_ref(trace_path), &IngestOptions::default())
        .map_err(bad_input)?;
    let first = |n: usize| {
        let limit = Transforms {
            limit: Some(n),
            ..Transforms::default()
        };
        limit
            .apply(trace.clone(), &mut Default::default())
            .map_err(bad_input)
    };
    let warmup = first(WARMUP_REQUESTS)?;
    let requests = args.requests.unwrap_or(DEFAULT_REQUESTS);
    let trace = first(requests)?;
    // Longer open loops: their late requests fit batcher.missed_release (a few in a hundred).
    let open_trace = first(requests.saturating_mul(OPEN_LOOP_TIMES))?;
    let model = model.to_string_lossy();
    let mut options = EndpointOptions::new(url, Protocol::Kserve, &model);
    options.seed = args.seed;
    // As `replay --endpoint`: a KServe model takes at most 512 tokens unless the pool says.
    options.max_input_tokens = pool.max_input_tokens.unwrap_or(512);
    // A hung server (traced Triton 2.51 sometimes hangs after a crash) ends a run in three
    // timeouts of 30 s, not one per request (hours at one client).
    options.timeout = std::time::Duration::from_secs(30);
    options.stop_after_timeouts = Some(3);
    // The compute's spread from batch to batch, at each size the batcher forms.
    let spread = SpreadPlan::new(
        pool.batcher.max_batch_size,
        pool.batcher.max_queue_delay.0,
        pool.execution.instance_count,
    );
    let measured = calibrate_through_server(
        &trace,
        &open_trace,
        &warmup,
        &options,
        &concurrencies,
        &spread,
    )
    .map_err(bad_input)?;
    // The inputs the batches were formed from, as the server took them (cut to the pool's
    // longest; the open loops' trace, which holds the closed loops'): where they differ, the
    // fit learns the time per padded token.
    let lengths: Vec<u32> = open_trace
        .input_tokens()
        .iter()
        .map(|&n| n.min(options.max_input_tokens))
        .collect();
    let mut fitted = fit_triton_stats(&scenario, &measured.stats, &lengths, url)?;
    let path = measured
        .apply_client_path(&mut fitted.scenario)
        .map_err(bad_input)?;
    let mut text = runs_text(&measured) + &fitted.describe(&model, Path::new(url));
    let command = format!(
        "capsim calibrate --endpoint {url} --model {model} --scenario {}",
        scenario_path.display()
    );
    let mut header = fitted.toml_header_of(&command);
    // Each fitted part's line goes to the report and the file's header; one not fitted says why
    // in the report alone.
    let mut note = |line: Option<String>, why_not: &str| match line {
        Some(line) => {
            text += &format!("  {line}\n");
            header += &format!("# {line}.\n");
        }
        None => text += why_not,
    };
    note(path, "");
    apply_server_fits(&measured, &mut fitted.scenario, &earlier, &mut note)?;
    print!("{text}");
    let toml = capsim_sim::build::toml_for_file(&fitted.scenario, out)?;
    std::fs::write(out, header + &toml).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// The parts fitted to the server's runs beyond the compute and the path, in order, each
/// applied to `scenario` and its line (or why not) handed to `note`; the share of batch ends
/// slept through pooled with the `earlier` calibrations' (`--pool`).
fn apply_server_fits(
    measured: &ServerCalibration,
    scenario: &mut Scenario,
    earlier: &[f64],
    note: &mut impl FnMut(Option<String>, &str),
) -> Result<()> {
    note(
        measured.apply_host(scenario).map_err(bad_input)?,
        "  [host] not modelled: the server is not a process of this machine that capsim may \
         read (/proc), or its runs' CPU could not tell the per-request work from the compute's\n",
    );
    // Before the speed levels, whose windows time the open loops by the simulation.
    note(
        measured.apply_residuals(scenario).map_err(bad_input)?,
        "  service.residuals not measured: too few rounds ran as one batch alone on the server\n",
    );
    // Before the missed releases: their fit simulates the open loops at the wandering speed.
    note(
        measured.apply_speed_levels(scenario).map_err(bad_input)?,
        "  execution.speed_levels not measured: too few windows of the open loops held enough \
         batches to read the machine's speed\n",
    );
    note(
        measured.apply_missed_release(scenario).map_err(bad_input)?,
        "  batcher.missed_release not fitted: no batching, no open loop or no client path to \
         compare with\n",
    );
    note(
        pool_missed_release(scenario, earlier).map_err(bad_input)?,
        if earlier.is_empty() {
            ""
        } else {
            "  --pool: nothing pooled, as this calibration fitted no batcher.missed_release\n"
        },
    );
    Ok(())
}

/// One line per run: each closed loop, each open loop, then the light open loop.
fn runs_text(measured: &ServerCalibration) -> String {
    let mut text = String::new();
    for run in &measured.runs {
        let head = format!("closed loop: {} clients", run.concurrency);
        text += &run_line(&head, run.requests, run.failed, run.path.as_ref());
    }
    for run in &measured.open {
        let head = format!(
            "open loop at {:.0}% of the closed loops' highest throughput: {:.1} req/s (the trace's arrivals, scaled)",
            run.fraction * 100.0,
            run.rate_rps
        );
        text += &run_line(&head, run.requests(), run.failed(), None);
    }
    if let Some(light) = &measured.light {
        let head = format!("open loop at light load: {:.1} req/s", light.rate_rps);
        text += &run_line(&head, light.requests, light.failed, light.path.as_ref());
    }
    let sizes: Vec<String> = measured.open_sizes.iter().map(u32::to_string).collect();
    text += &format!(
        "compute per batch size: the open loops' alone at size{} {} (at least {OPEN_LOOP_MIN_REQUESTS} \
         requests each), the closed and open loops' together at the others\n",
        if sizes.len() == 1 { "" } else { "s" },
        if sizes.is_empty() {
            "none".to_string()
        } else {
            sizes.join(", ")
        }
    );
    for (k, cpu) in measured.cpu_runs.iter().enumerate() {
        text += &format!(
            "CPU, run {}: {:.0} requests, compute {:.1} ms, the server's processes {:.0} ms, the \
             load generator {:.0} ms\n",
            k + 1,
            cpu.requests,
            cpu.compute_ns / 1e6,
            cpu.server_ns / 1e6,
            cpu.client_ns / 1e6
        );
    }
    text
}

/// A run's line: `head`, its answered and failed requests, and its client's and server's means.
fn run_line(head: &str, requests: u64, failed: u64, path: Option<&ServerOverheads>) -> String {
    let mut line = format!("{head}, {} requests answered", requests - failed);
    if failed > 0 {
        line += &format!(", {failed} failed");
    }
    if let Some(path) = path {
        line += &format!(
            "; the client's mean end to end {:.3} ms, the server's mean per request {:.3} ms",
            path.client_ns / 1e6,
            path.server.request_ns / 1e6
        );
    }
    line + "\n"
}
