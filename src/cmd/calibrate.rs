//! `capsim calibrate`: measure an ONNX model through ONNX Runtime and write a profile.

mod endpoint;
mod operators;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use capsim_calibrate::{
    CalibrateError, CalibrationConfig, Progress, ProviderChoice, ProviderDecision, Runtime,
    calibrate, check_model_file,
};
use capsim_sim::timing::profile::{IdleSlowdown, Profile};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::BadInput;
use super::shared::runtime::{Ep, cpu_wait_share, load_runtime, user_facing};

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// The ONNX model to measure. With --operators: the model whose operators the table
    /// measured, a preset (qwen3-32b, llama-3.1-8b, ...) or the path of its Hugging Face
    /// config.json; needed for an LLMServingSim bundle, which records no shape.
    #[arg(long, value_name = "MODEL.onnx", required_unless_present = "operators")]
    pub model: Option<PathBuf>,
    /// Execution provider.
    #[arg(long, value_enum, default_value = "auto")]
    pub ep: Ep,
    /// Batch sizes of the grid.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8",
        value_name = "B,B,..."
    )]
    pub batch: Vec<u32>,
    /// A dynamic dimension and its values, `NAME=V,V,...` (repeatable). The one with several
    /// values is the grid's length axis (the simulator pads batches to their longest input on it).
    #[arg(long = "dim", value_name = "NAME=V,V,...")]
    pub dims: Vec<String>,
    /// Untimed runs before each grid point.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub warmup: u32,
    /// Most timed runs per grid point.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub iters: u32,
    /// Fewest timed runs before a grid point may stop early.
    #[arg(long, default_value_t = 60, value_name = "N")]
    pub min_iters: u32,
    /// Stop a grid point early when p50 and p99 move by less than this fraction between checks.
    #[arg(long, default_value_t = 0.03, value_name = "FRACTION")]
    pub tolerance: f64,
    /// ONNX Runtime intra-op threads (0: its default, one per physical core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: u32,
    /// Integer (token id) inputs are drawn below this.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub vocab: u64,
    /// Seed of the random input data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Idle wait before every run, as a serving worker waits for its next batch (`0` runs back to
    /// back, which reads faster than a server sees after idling).
    #[arg(long, default_value = "0s", value_name = "DURATION")]
    pub idle_gap: String,
    /// Idle waits after which to measure how much longer a run takes than back to back, at the
    /// grid's smallest and largest batch (the simulator lengthens each batch by its model
    /// instance's idle time); `none` skips it. Not used with --decoder.
    #[arg(
        long,
        default_value = "0,500us,1ms,2ms,4ms,8ms,16ms",
        value_name = "DURATIONS"
    )]
    pub idle_curve: String,
    /// ONNX Runtime shared library (default: ORT_DYLIB_PATH, the project's .venv, then the
    /// active Python's onnxruntime package).
    #[arg(long, value_name = "libonnxruntime.so")]
    pub ort_lib: Option<PathBuf>,
    /// Where to write the profile (JSON).
    #[arg(
        short = 'o',
        long = "out",
        value_name = "PROFILE.json",
        required_unless_present = "operators"
    )]
    pub out: Option<PathBuf>,
    /// Calibrate a decoder with a KV cache (float inputs named past...): measure prefill and
    /// decode steps and write a step profile for a `[step_time]` table with `kind = "profile"`
    /// (--batch and --dim do not apply; token ids stay below the model's vocabulary).
    #[arg(long)]
    pub decoder: bool,
    /// With --decoder: prompt lengths of the prefill steps.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,64,256",
        value_name = "N,N,..."
    )]
    pub prefill: Vec<u32>,
    /// With --decoder: batch sizes of the decode steps.
    #[arg(
        long = "decode-batch",
        value_delimiter = ',',
        default_value = "1,4,16",
        value_name = "B,B,..."
    )]
    pub decode_batch: Vec<u32>,
    /// With --decoder: past lengths (context tokens per sequence) of the decode steps.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,256",
        value_name = "C,C,..."
    )]
    pub context: Vec<u32>,
    /// Calibrate the per-operator roofline on a measured operator table instead of measuring an
    /// ONNX model: the folder of Vidur's mlp.csv, or of an LLMServingSim profiler bundle
    /// (meta.yaml and tpN/, with --model). Prints the coefficients and each operator's
    /// error on the table itself (see docs/step-time.md).
    #[arg(long, value_name = "DIR", conflicts_with = "decoder")]
    pub operators: Option<PathBuf>,
    /// With --operators: the tensor-parallel degree of the rows to calibrate on.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "operators")]
    pub tensor_parallel: u32,
    /// With --operators: the GPU's datasheet figures, a hardware catalogue name (h100-sxm,
    /// h200, a100-80gb, rtx4090, rtx-pro-6000, ...; see docs/step-time.md); default: the GPU
    /// the table names.
    #[arg(long, value_name = "NAME", requires = "operators")]
    pub hardware: Option<String>,
    /// With --operators: another table of the same GPU to predict with the calibrated
    /// coefficients, at every tensor-parallel degree it has (a bundle's tp_degrees, predicted
    /// with --model's shape; a Vidur table with its own) (repeatable).
    #[arg(long, value_name = "DIR", requires = "operators")]
    pub check: Vec<PathBuf>,
    /// Measure the model served by a running Triton at this URL (`http://HOST:PORT`) instead of
    /// an ONNX file: closed-loop runs at a few concurrencies, then a + b * size fitted to the
    /// server's own mean compute time per batch size and `[postprocess] base` to its time per
    /// request outside the queue and the model, the client's path at light load, and, for a
    /// server on this machine, `[host]` from the CPU Linux accounts to it and to the load
    /// generator, and, with batching, `batcher.missed_release` (the share of batch ends its
    /// batcher sleeps through) from an open loop; writes --scenario with them to -o (a TOML).
    /// With --model the model's name on the server, --scenario and --trace.
    #[arg(long, value_name = "URL", conflicts_with_all = ["operators", "decoder"])]
    pub endpoint: Option<String>,
    /// With --endpoint: the scenario whose batcher the server runs (its max_batch_size and
    /// instance_count set the default --concurrency); the fit is written into it.
    #[arg(long, value_name = "S.toml", requires = "endpoint")]
    pub scenario: Option<PathBuf>,
    /// With --endpoint: the trace whose request sizes are sent (its first --requests rows).
    #[arg(long, value_name = "TRACE", requires = "endpoint")]
    pub trace: Option<PathBuf>,
    /// With --endpoint: the clients of each closed-loop run (default: powers of two from 1 to
    /// one and a half times max_batch_size times instance_count, which it ends with).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,N,...",
        requires = "endpoint"
    )]
    pub concurrency: Vec<u32>,
    /// With --endpoint: requests of each closed-loop run (default 400); each open loop sends
    /// five times as many.
    #[arg(long, value_name = "N", requires = "endpoint")]
    pub requests: Option<usize>,
    /// With --endpoint: an earlier calibration of the same deployment (a file this command
    /// wrote for the same batcher) to pool with this one (repeatable): the share of batch ends
    /// slept through (`batcher.missed_release`) becomes the mean of the shares those files hold
    /// and this one's, as one calibration's share moves with the minutes its open loop ran in.
    /// A file written with --pool holds a pooled share: a chain of calibrations each pooling
    /// every earlier file weighs the first ones more.
    #[arg(long, value_name = "CALIBRATED.toml", requires = "endpoint")]
    pub pool: Vec<PathBuf>,
}

/// The ONNX model and the profile to write, which every mode but --operators needs.
fn model_and_out(args: &CalibrateArgs) -> Result<(PathBuf, PathBuf), BadInput> {
    match (&args.model, &args.out) {
        (Some(model), Some(out)) => Ok((model.clone(), out.clone())),
        _ => Err(BadInput(
            "give the ONNX model to measure with --model and the profile to write with --out \
             (or a measured operator table with --operators)"
                .into(),
        )),
    }
}

/// A progress bar of measured points, counted in `unit`.
fn progress_bar(unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {unit}  {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Which execution provider a calibration uses, and why CUDA was not used when `auto` fell back.
fn provider_line(decision: &ProviderDecision, choice: ProviderChoice) -> String {
    match (&decision.cuda_unavailable, choice) {
        (Some(reason), ProviderChoice::Auto) => {
            format!("execution provider: cpu (CUDA not used: {reason})")
        }
        _ => format!("execution provider: {}", decision.provider.name()),
    }
}

/// `--idle-curve`: comma-separated durations, or `none`.
fn parse_idle_curve(text: &str) -> Result<Vec<u64>, BadInput> {
    if text.trim() == "none" {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|part| {
            capsim_sim::quantity::parse_duration_ns(part.trim()).map_err(|e| {
                BadInput(format!(
                    "--idle-curve: {e}; give durations such as 0,1ms,4ms, or none"
                ))
            })
        })
        .collect()
}

/// A gap for a terminal: `500us`, `2ms`.
fn format_gap(gap_ns: u64) -> String {
    if gap_ns < 1_000_000 {
        format!("{}us", gap_ns / 1_000)
    } else {
        format!("{}ms", gap_ns as f64 / 1e6)
    }
}

/// Parses `NAME=V,V,...`.
fn parse_dim(text: &str) -> Result<(String, Vec<u32>), BadInput> {
    let bad = || {
        BadInput(format!(
            "--dim {text:?}: expected NAME=V,V,... with positive integers, for example --dim seq=16,32,64"
        ))
    };
    let (name, values) = text.split_once('=').ok_or_else(bad)?;
    let values: Vec<u32> = values
        .split(',')
        .map(|v| v.trim().parse::<u32>().ok().filter(|&v| v > 0))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if name.trim().is_empty() || values.is_empty() {
        return Err(bad());
    }
    Ok((name.trim().to_string(), values))
}

pub fn run(args: CalibrateArgs) -> Result<()> {
    if let Some(table) = &args.operators {
        return operators::run(table, &args);
    }
    if let Some(url) = &args.endpoint {
        return endpoint::run(url, &args);
    }
    if args.decoder {
        return run_decoder(args);
    }
    let (model, out) = model_and_out(&args)?;
    let dims = parse_dims(&args.dims)?;
    check_model_file(&model).map_err(user_facing)?;
    let runtime = load_runtime(args.ort_lib.as_deref())?;
    let config = CalibrationConfig {
        model: model.clone(),
        provider: args.ep.into(),
        batch_sizes: args.batch.clone(),
        dims,
        warmup_iters: args.warmup,
        max_iters: args.iters,
        min_iters: args.min_iters,
        convergence_tolerance: args.tolerance,
        intra_threads: args.threads,
        vocab: args.vocab,
        seed: args.seed,
        idle_gap_ns: capsim_sim::quantity::parse_duration_ns(&args.idle_gap)
            .map_err(|e| BadInput(format!("--idle-gap: {e}")))?,
        idle_curve_gaps_ns: parse_idle_curve(&args.idle_curve)?,
    };

    let started = Instant::now();
    let (profile, converged) = measure_with_progress(&runtime, &config)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::create_out_dir(dir, "--out")?;
    }
    profile
        .write(&out)
        .with_context(|| format!("writing the profile to {}", out.display()))?;
    let fit = profile.fit;
    println!(
        "calibrated {} on {} ({}): {} grid points ({} converged early) in {:.1}s",
        model.display(),
        profile.environment.execution_provider,
        profile.environment.device_name,
        profile.points.len(),
        converged,
        started.elapsed().as_secs_f64()
    );
    println!(
        "affine fit of mean latency: {:.3}ms + {:.3}ms*batch + {:.5}ms*batch*length, R^2 = {:.4}",
        fit.a_ns * 1e-6,
        fit.b_ns * 1e-6,
        fit.c_ns * 1e-6,
        fit.r_squared
    );
    if let Some(idle) = &profile.idle_slowdown {
        print_idle_slowdown(idle);
    }
    if let Some(share) = cpu_wait_share(&profile) {
        println!(
            "the measuring thread waited for a CPU {:.1}% of its timed runs (other processes); \
             above a few percent, calibrate again on a quieter machine",
            100.0 * share
        );
    }
    println!("profile written to {}", out.display());
    let plot_path = out.with_extension("fit.png");
    let plot = capsim_report::plot::ProfileFitPlot::from_profile(&profile);
    capsim_report::plot::draw_profile_fit(
        &plot,
        capsim_report::plot::PlotSize::DEFAULT,
        &plot_path,
    )
    .with_context(|| {
        format!(
            "drawing the measured points against the fit to {}",
            plot_path.display()
        )
    })?;
    println!(
        "measured points against the fit drawn to {}",
        plot_path.display()
    );
    Ok(())
}

/// The `--dim NAME=V,V,...` flags by name; a name given twice is refused.
fn parse_dims(texts: &[String]) -> Result<BTreeMap<String, Vec<u32>>> {
    let mut dims = BTreeMap::new();
    for text in texts {
        let (name, values) = parse_dim(text)?;
        if dims.insert(name.clone(), values).is_some() {
            return Err(BadInput(format!("--dim {name} is given twice")).into());
        }
    }
    Ok(dims)
}

/// Calibrates with a progress bar on stderr (the provider line first, then each grid point);
/// returns the profile and how many points converged early.
fn measure_with_progress(
    runtime: &Runtime,
    config: &CalibrationConfig,
) -> Result<(Profile, usize)> {
    let bar = progress_bar("grid points");
    let length_name = config
        .dims
        .iter()
        .find(|(_, v)| v.len() > 1)
        .map(|(k, _)| k.clone());
    let mut converged = 0usize;
    let profile = calibrate(runtime, config, &mut |event| match event {
        Progress::Started { points, decision } => {
            bar.set_length(points as u64);
            let line = provider_line(decision, config.provider);
            bar.suspend(|| {
                eprintln!(
                    "calibrate: {line}; ONNX Runtime {} from {}",
                    runtime.version(),
                    runtime.library().display()
                )
            });
        }
        Progress::PointStarted { batch, length } => {
            let at = match (length, &length_name) {
                (Some(l), Some(name)) => format!("batch {batch}, {name}={l}"),
                _ => format!("batch {batch}"),
            };
            bar.set_message(at);
        }
        Progress::PointFinished(point) => {
            converged += usize::from(point.converged);
            bar.inc(1);
        }
        Progress::IdleSlowdownStarted { points, runs } => {
            bar.set_message(format!(
                "idle slowdown: {runs} runs at {points} grid points"
            ));
        }
        Progress::IdleSlowdownFinished(_) => {}
    })
    .map_err(|err| decoder_hint(err, runtime, &config.model))?;
    bar.finish_and_clear();
    Ok((profile, converged))
}

/// A line per idle-slowdown curve: the run time back to back, and how much more after each gap.
fn print_idle_slowdown(idle: &IdleSlowdown) {
    for point in &idle.points {
        let back_to_back_ns = point.median_ns[0];
        let extra: Vec<String> = idle
            .gaps_ns
            .iter()
            .zip(&point.median_ns)
            .skip(1)
            .map(|(gap, t)| format!("{} {:+.3}", format_gap(*gap), (t - back_to_back_ns) * 1e-6))
            .collect();
        println!(
            "run time after an idle wait, batch {}{} ({:.3}ms back to back), ms more: {}",
            point.batch_size,
            point
                .length
                .map_or(String::new(), |l| format!(", length {l}")),
            back_to_back_ns * 1e-6,
            extra.join(", ")
        );
    }
}

/// As [`user_facing`]; when a dimension is missing and the model has past key/value inputs,
/// also says to calibrate it as a decoder with --decoder.
fn decoder_hint(err: CalibrateError, runtime: &Runtime, model: &std::path::Path) -> anyhow::Error {
    let missing_dim = matches!(
        err,
        CalibrateError::UnboundDim { .. } | CalibrateError::UnknownDim { .. }
    );
    let is_decoder = || {
        runtime
            .open_session(model, ProviderChoice::Cpu, 1)
            .ok()
            .and_then(|(session, _)| capsim_calibrate::model::inputs_of(&session, model).ok())
            .is_some_and(|inputs| capsim_calibrate::decoder::is_decoder(&inputs))
    };
    if missing_dim && is_decoder() {
        return BadInput(format!(
            "{err}; this model has past key/value inputs, so it is a decoder with a KV cache: \
             calibrate its steps with --decoder (see docs/step-time.md)"
        ))
        .into();
    }
    user_facing(err)
}

/// `capsim calibrate --decoder`: prefill and decode steps of a decoder into a step profile.
fn run_decoder(args: CalibrateArgs) -> Result<()> {
    use capsim_calibrate::decoder::{DecoderConfig, DecoderProgress, calibrate_decoder};
    let (model, out) = model_and_out(&args)?;
    check_model_file(&model).map_err(user_facing)?;
    let runtime = load_runtime(args.ort_lib.as_deref())?;
    let config = DecoderConfig {
        model: model.clone(),
        provider: args.ep.into(),
        prefill_tokens: args.prefill.clone(),
        decode_batches: args.decode_batch.clone(),
        contexts: args.context.clone(),
        warmup_iters: args.warmup,
        max_iters: args.iters,
        min_iters: args.min_iters,
        convergence_tolerance: args.tolerance,
        intra_threads: args.threads,
        vocab: Some(args.vocab),
        seed: args.seed,
        idle_gap_ns: capsim_sim::quantity::parse_duration_ns(&args.idle_gap)
            .map_err(|e| BadInput(format!("--idle-gap: {e}")))?,
    };
    let started = Instant::now();
    let bar = progress_bar("steps");
    let mut converged = 0usize;
    let profile = calibrate_decoder(&runtime, &config, &mut |event| match event {
        DecoderProgress::Started { points, decision } => {
            bar.set_length(points as u64);
            let line = provider_line(decision, config.provider);
            bar.suspend(|| {
                eprintln!(
                    "calibrate --decoder: {line}; ONNX Runtime {}",
                    runtime.version()
                )
            });
        }
        DecoderProgress::PointStarted(shape) => bar.set_message(shape.to_string()),
        DecoderProgress::PointFinished { converged: c, .. } => {
            converged += usize::from(c);
            bar.inc(1);
        }
    })
    .map_err(user_facing)?;
    bar.finish_and_clear();
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::create_out_dir(dir, "--out")?;
    }
    profile
        .write(&out)
        .with_context(|| format!("writing the step profile to {}", out.display()))?;
    println!(
        "calibrated decoder {} on {} ({}): {} prefill and {} decode steps ({} converged early) in {:.1}s",
        model.display(),
        profile.environment.execution_provider,
        profile.environment.device_name,
        profile.prefill.len(),
        profile.decode.len(),
        converged,
        started.elapsed().as_secs_f64()
    );
    for p in &profile.prefill {
        println!(
            "  prefill {:>6} tokens: mean {:.3}ms",
            p.tokens,
            p.latency_mean_ns * 1e-6
        );
    }
    for p in &profile.decode {
        println!(
            "  decode batch {:>4}, context {:>6}: mean {:.3}ms",
            p.batch,
            p.context,
            p.latency_mean_ns * 1e-6
        );
    }
    println!(
        "step profile written to {} (use it as [step_time] kind = \"profile\")",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dim_flags_parse_names_and_values_and_reject_junk() {
        assert_eq!(
            parse_dim("seq=16,32").expect("parse"),
            ("seq".to_string(), vec![16, 32])
        );
        for bad in ["seq", "seq=", "seq=a", "=16", "seq=0"] {
            assert!(parse_dim(bad).is_err(), "{bad} should be rejected");
        }
    }
}
