//! What a capacity review rests on besides the runs: the question (the traffic and the growth
//! planned for), the scenario's provenance and the sweep's settings, and the sensitivity run.
//! Plain data that a sweep stores in `sweep.json` (its `review`), so that `capsim report` redraws
//! the same documents; the documents and the sensitivity run are in [`crate::review`], which
//! re-exports these types. A module of its own so that `sweep` stores what `review` reads without
//! the two knowing each other.

use std::path::Path;

use capsim_sim::Scenario;
use capsim_sim::scenario::ServiceSpec;
use capsim_sim::timing::hardware;
use capsim_sim::timing::profile::{Environment, Profile};
use capsim_sim::timing::step_profile::StepProfile;
use serde::{Deserialize, Serialize};

use crate::interval::Estimate;

/// What a sweep was asked and what its answer rests on, beyond the runs: `sweep.json`'s `review`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// The traffic and the growth planned for.
    pub question: Question,
    /// The scenario's provenance and the sweep's statistical settings.
    pub basis: Basis,
    /// The answer's configuration again with slower service times; `None` when not run (a
    /// shard of a sweep, or a service model capsim cannot scale).
    pub sensitivity: Option<Sensitivity>,
}

/// The traffic the answer is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// The trace file(s), as given.
    pub trace: String,
    /// Requests in the trace (after transforms).
    pub requests: u64,
    /// Time from the first arrival to the last, seconds.
    pub span_s: f64,
    /// Mean arrival rate, requests per second.
    pub mean_rate_rps: f64,
    /// Highest arrivals in any 1 s window, requests per second.
    pub peak_rate_1s_rps: f64,
    /// Highest mean rate over any 60 s window, requests per second.
    pub peak_rate_60s_rps: f64,
    /// Mean input size, tokens.
    pub input_tokens_mean: f64,
    /// 99th percentile of input size, tokens.
    pub input_tokens_p99: f64,
    /// Traffic growth planned for: the trace replayed at this multiple of its rate (1: today).
    pub growth: f64,
}

/// Where the service times came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceSource {
    /// A profile measured by `capsim calibrate`.
    Calibrated,
    /// Coefficients fitted by `capsim fit` to a measured log.
    Fitted,
    /// Coefficients written by hand (or an analytic estimate): not measured.
    Unmeasured,
}

/// The scenario's provenance and the sweep's statistical settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Basis {
    /// The scenario file, as given.
    pub scenario: String,
    /// The scenario's `description`.
    pub description: Option<String>,
    /// Where the service times came from.
    pub service_source: ServiceSource,
    /// The service-time model in words (its coefficients, or the profile's machine and date).
    pub service: String,
    /// Assumed overheads outside the model, `key = value` as the scenario sets them.
    pub overheads: Vec<String>,
    /// Seeds per point.
    pub seeds: u32,
    /// The first seed.
    pub base_seed: u64,
    /// Largest fraction of requests lost at a sustainable load.
    pub max_lost_fraction: f64,
}

/// The answer's configuration with every service time scaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// The factor service times were multiplied by.
    pub service_scale: f64,
    /// The configuration re-run.
    pub configuration: String,
    /// Its capacity with the slower service, requests per second; `None` when not run.
    pub capacity_rps: Option<Estimate>,
    /// Why it was not run, when it was not.
    pub note: Option<String>,
}

impl Question {
    /// The question for a trace with `summary`'s figures, named `trace`, planned at `growth`.
    pub fn of(trace: String, summary: &capsim_trace::Summary, growth: f64) -> Question {
        Question {
            trace,
            requests: summary.rows,
            span_s: summary.span_s,
            mean_rate_rps: summary.mean_rate_rps.unwrap_or(0.0),
            peak_rate_1s_rps: summary.peak_rate_1s_rps,
            peak_rate_60s_rps: summary.peak_rate_60s_rps,
            input_tokens_mean: summary.input_tokens.mean,
            input_tokens_p99: summary.input_tokens.p99,
            growth,
        }
    }
}

/// Keys outside the model that a scenario assumes, reported when it sets them.
const OVERHEAD_KEYS: [&str; 12] = [
    "network.latency",
    "network.bandwidth",
    "gateway.overhead",
    "host.cores",
    "host.request",
    "host.request_per_input_token",
    "host.response",
    "preprocess.workers",
    "preprocess.base",
    "preprocess.per_input_token",
    "postprocess.base",
    "postprocess.per_output_token",
];

impl Basis {
    /// The provenance of `scenario`, read from `path` (the file's leading comments tell a fitted
    /// scenario: the header `capsim fit` writes, or a line saying the model is `capsim fit`'s).
    /// A measured profile's words end with a hardware note when the scenario describes other
    /// hardware than the profile was measured on (see `hardware_note`).
    pub fn of(
        scenario: &Scenario,
        path: &Path,
        seeds: u32,
        base_seed: u64,
        max_lost_fraction: f64,
    ) -> Basis {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let fitted = text.lines().take_while(|l| l.starts_with('#')).any(|l| {
            l.starts_with("# Fitted by")
                || l.contains("`capsim fit`'s")
                || l.contains("fitted (`capsim fit")
        });
        let (mut service_source, mut service, environment) = service_words(scenario, path);
        if fitted && service_source == ServiceSource::Unmeasured {
            service_source = ServiceSource::Fitted;
        }
        if let Some(note) = environment
            .as_ref()
            .and_then(|env| hardware_note(&described_hardware(scenario, &text), env))
        {
            service = format!("{service}; {note}");
        }
        let overheads = OVERHEAD_KEYS
            .iter()
            .filter_map(|key| scenario.get(key).map(|v| format!("{key} = {v}")))
            .collect();
        Basis {
            scenario: path.display().to_string(),
            description: scenario.description.clone(),
            service_source,
            service,
            overheads,
            seeds,
            base_seed,
            max_lost_fraction,
        }
    }
}

/// GPU names a scenario may describe its hardware by, matched as whole words, ignoring case.
const GPU_WORDS: [&str; 18] = [
    "gpu", "cuda", "t4", "a10", "a10g", "a30", "a40", "a100", "h100", "h200", "h20", "b200", "l4",
    "l40", "l40s", "v100", "rtx", "mi300x",
];

/// The text a scenario describes its hardware in: its name, its description and the file's
/// leading comment lines.
fn described_hardware(scenario: &Scenario, file_text: &str) -> String {
    let comments: Vec<&str> = file_text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .collect();
    format!(
        "{}\n{}\n{}",
        scenario.name,
        scenario.description.as_deref().unwrap_or(""),
        comments.join("\n")
    )
}

/// The GPU words of [`GPU_WORDS`] that `text` contains as whole words (split at anything but
/// letters and digits), lowercase, in the order of [`GPU_WORDS`].
fn gpu_words(text: &str) -> Vec<&'static str> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    GPU_WORDS
        .into_iter()
        .filter(|g| words.iter().any(|w| w == g))
        .collect()
}

/// The rule that says a measured profile answers for other hardware than the scenario
/// describes: the scenario (`described`: its name, description and leading comments) names a GPU
/// (a word of [`GPU_WORDS`]) and the profile was measured on the CPU, or on a GPU whose name
/// contains none of the GPU models named. The note says the answer is for the profile's
/// hardware, since the simulation uses the profile's times; `None` when nothing conflicts.
pub fn hardware_note(described: &str, environment: &Environment) -> Option<String> {
    let named = gpu_words(described);
    if named.is_empty() {
        return None;
    }
    let on_cpu = !environment.execution_provider.eq_ignore_ascii_case("cuda");
    let models: Vec<&str> = named
        .iter()
        .copied()
        .filter(|w| !matches!(*w, "gpu" | "cuda"))
        .collect();
    let device = gpu_words(&environment.device_name);
    let same_gpu = !on_cpu && (models.is_empty() || models.iter().any(|m| device.contains(m)));
    if same_gpu {
        return None;
    }
    Some(format!(
        "the scenario describes other hardware ({}) than the profile was measured on: the answer is for servers like the profile's machine",
        named
            .iter()
            .map(|w| w.to_ascii_uppercase())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Where a profile was measured, in words: `cpu (AMD EPYC, 2 logical CPUs)` or
/// `cuda (NVIDIA H200)`.
fn measured_on(environment: &Environment) -> String {
    if environment.execution_provider.eq_ignore_ascii_case("cuda") {
        format!(
            "{} ({})",
            environment.execution_provider, environment.device_name
        )
    } else {
        format!(
            "{} ({}, {} logical CPUs)",
            environment.execution_provider, environment.cpu_model, environment.logical_cpus
        )
    }
}

/// A profile's environment in one phrase: the device, ONNX Runtime's version, the date.
fn environment_words(environment: &Environment) -> String {
    format!(
        "measured on {} through ONNX Runtime {} on {}",
        measured_on(environment),
        environment.ort_version,
        environment.date.get(..10).unwrap_or(&environment.date)
    )
}

/// The default pool's service-time model in words, where it came from, and the environment of
/// the profile it reads, if any.
fn service_words(scenario: &Scenario, path: &Path) -> (ServiceSource, String, Option<Environment>) {
    let Some(pool) = scenario.pools().first() else {
        return (ServiceSource::Unmeasured, "no pool".to_string(), None);
    };
    if pool.llm.is_some() {
        return step_words(scenario, path);
    }
    let ms = |ns: u64| format!("{} ms", trim(ns as f64 / 1e6));
    let (source, words) = match &pool.service_spec {
        Some(ServiceSpec::Profile { path: profile }) => return profile_words(path, profile),
        Some(ServiceSpec::Affine {
            a,
            b,
            c,
            d,
            size_factors,
            residuals,
        }) => (
            ServiceSource::Unmeasured,
            format!(
                "affine: {} per batch + {} per request + {} µs per padded input token (batch size × longest input){}{}{}",
                ms(a.0),
                ms(b.0),
                trim(c.0 as f64 / 1e3),
                if d.0 > 0 {
                    format!(
                        " + {} ns per padded token per token of its sequence (batch size × longest input²)",
                        d.0
                    )
                } else {
                    String::new()
                },
                if size_factors.is_some() {
                    ", times each batch size's measured level"
                } else {
                    ""
                },
                if residuals.is_some() {
                    ", times measured residuals"
                } else {
                    ""
                }
            ),
        ),
        Some(ServiceSpec::Constant { time, .. }) => (
            ServiceSource::Unmeasured,
            format!("constant: {} per batch", ms(time.0)),
        ),
        Some(ServiceSpec::Exponential { mean }) => (
            ServiceSource::Unmeasured,
            format!("exponential with mean {} per batch", ms(mean.0)),
        ),
        None => (ServiceSource::Unmeasured, "none".to_string()),
    };
    (source, words, None)
}

/// A continuous pool's step-time model in words, ending with the GPU its `hardware` names.
fn step_words(scenario: &Scenario, path: &Path) -> (ServiceSource, String, Option<Environment>) {
    let (source, words, environment) = step_model_words(scenario, path);
    let words = match scenario.get("step_time.hardware").and_then(|v| v.as_str()) {
        Some(name) => match hardware::find(name) {
            Some(part) => format!("{words}, on the {} ({})", part.name, part.model),
            None => format!("{words}, on {name}"),
        },
        None => words,
    };
    (source, words, environment)
}

/// A continuous pool's step-time model in words.
fn step_model_words(
    scenario: &Scenario,
    path: &Path,
) -> (ServiceSource, String, Option<Environment>) {
    let kind = scenario
        .get("step_time.kind")
        .and_then(|v| v.as_str())
        .unwrap_or("linear");
    match kind {
        "profile" => {
            let written = scenario
                .get("step_time.path")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            let dir = path.parent().unwrap_or_else(|| Path::new("."));
            let environment = StepProfile::read(&dir.join(written))
                .ok()
                .map(|p| p.environment);
            let measured = environment
                .as_ref()
                .map_or(String::new(), |env| format!(", {}", environment_words(env)));
            (
                ServiceSource::Calibrated,
                format!("step times from the decoder profile {written}{measured}"),
                environment,
            )
        }
        "roofline" => (
            ServiceSource::Unmeasured,
            "step times from an analytic roofline of the model on the GPU, with assumed efficiencies".to_string(),
            None,
        ),
        "operators" => (
            ServiceSource::Calibrated,
            format!(
                "step times composed from the measured per-operator table {}",
                scenario
                    .get("step_time.profile")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
            ),
            None,
        ),
        _ => (
            ServiceSource::Unmeasured,
            "step times from a linear model written in the scenario".to_string(),
            None,
        ),
    }
}

/// A calibrated profile named at `profile` (relative to the scenario file at `path`) in words:
/// the file, where and when it was measured, and its affine fit.
fn profile_words(path: &Path, profile: &Path) -> (ServiceSource, String, Option<Environment>) {
    let full = path
        .parent()
        .map_or(profile.to_path_buf(), |d| d.join(profile));
    match Profile::read(&full) {
        Ok(p) => (
            ServiceSource::Calibrated,
            format!(
                "calibrated profile {}, {}; its affine fit has R² {:.3}",
                profile.display(),
                environment_words(&p.environment),
                p.fit.r_squared
            ),
            Some(p.environment),
        ),
        Err(e) => (
            ServiceSource::Calibrated,
            format!("calibrated profile {} ({e})", profile.display()),
            None,
        ),
    }
}

/// `value` with at most three decimals and no trailing zeros.
pub(crate) fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classifier profile committed under traces/profiles (measured on a 2-CPU AMD EPYC).
    fn committed_profile() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/profiles/text_classifier.cpu.json")
    }

    /// The basis of a scenario file written with `header` above a profile-served default pool.
    fn basis_with_header(header: &str) -> Basis {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        let text = format!(
            "{header}[service]\nkind = \"profile\"\npath = {:?}\n",
            committed_profile().display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        let scenario = Scenario::from_path(&path).unwrap();
        Basis::of(&scenario, &path, 3, 0, 0.001)
    }

    /// The basis of a continuous-batching scenario whose `[step_time]` is `step_time`.
    fn step_basis(step_time: &str) -> Basis {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        let text = format!(
            "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 100\n\
             [step_time]\n{step_time}"
        );
        std::fs::write(&path, text).unwrap();
        let scenario = Scenario::from_path(&path).unwrap();
        Basis::of(&scenario, &path, 1, 0, 0.001)
    }

    #[test]
    fn a_step_times_hardware_is_named_in_the_basis_in_every_kind() {
        let roofline =
            step_basis("kind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"H200\"\n");
        assert!(
            roofline
                .service
                .ends_with(", on the h200 (NVIDIA H200 SXM 141 GB)"),
            "{}",
            roofline.service
        );
        let linear = step_basis("kind = \"linear\"\nbase = \"5ms\"\nhardware = \"l40s\"\n");
        assert!(
            linear.service.starts_with("step times from a linear model")
                && linear.service.ends_with("on the l40s (NVIDIA L40S 48 GB)"),
            "{}",
            linear.service
        );
        let unnamed = step_basis("kind = \"linear\"\nbase = \"5ms\"\n");
        assert!(!unnamed.service.contains(", on "), "{}", unnamed.service);
        let operators = step_basis(
            "kind = \"operators\"\nprofile = \"bundle\"\nmodel = \"qwen3-32b\"\nhardware = \"rtx-pro-6000\"\n",
        );
        assert!(
            operators.service.starts_with("step times composed from the measured per-operator table bundle, on the rtx-pro-6000"),
            "{}",
            operators.service
        );
    }

    fn cpu_environment() -> Environment {
        Profile::read(&committed_profile()).unwrap().environment
    }

    #[test]
    fn a_profile_is_named_with_its_device_cpus_runtime_and_day() {
        let basis = basis_with_header("# One model instance per server on this CPU.\n");
        assert_eq!(basis.service_source, ServiceSource::Calibrated);
        assert!(
            basis.service.contains("text_classifier.cpu.json")
                && basis.service.contains(
                    "measured on cpu (AMD EPYC, 2 logical CPUs) through ONNX Runtime 1.31.1 on 2026-12-01"
                ),
            "{}",
            basis.service
        );
        assert!(
            !basis.service.contains("other hardware"),
            "a scenario that names no GPU gets no hardware note: {}",
            basis.service
        );
    }

    #[test]
    fn a_cpu_profile_under_a_scenario_that_describes_a_gpu_says_the_answer_is_for_the_cpu() {
        let basis = basis_with_header(
            "# A BERT-base classifier, one T4-class GPU per server.\ndescription = \"BERT on T4\"\n",
        );
        assert!(
            basis.service.contains(
                "measured on cpu (AMD EPYC, 2 logical CPUs) through ONNX Runtime 1.31.1 on 2026-12-01; its affine fit has R² 0.983; the scenario describes other hardware (GPU, T4) than the profile was measured on: the answer is for servers like the profile's machine"
            ),
            "{}",
            basis.service
        );
    }

    #[test]
    fn the_demo_scenario_rests_on_its_committed_cpu_profile_without_a_hardware_warning() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/classifier-cpu.toml");
        let scenario = Scenario::from_path(&path).unwrap();
        let basis = Basis::of(&scenario, &path, 3, 0, 0.001);
        assert_eq!(basis.service_source, ServiceSource::Calibrated);
        assert!(
            basis
                .service
                .contains("measured on cpu (AMD EPYC, 2 logical CPUs)")
                && !basis.service.contains("other hardware"),
            "{}",
            basis.service
        );
    }

    #[test]
    fn a_gpu_profile_conflicts_only_with_other_gpu_models() {
        let mut h200 = cpu_environment();
        h200.execution_provider = "cuda".to_string();
        h200.device_name = "NVIDIA H200".to_string();
        assert_eq!(hardware_note("8B model on one H200 GPU", &h200), None);
        assert_eq!(hardware_note("served on a GPU", &h200), None);
        let note =
            hardware_note("one T4 per server", &h200).expect("a T4 scenario on an H200 profile");
        assert!(note.contains("other hardware (T4)"), "{note}");
    }

    #[test]
    fn gpu_words_match_whole_words_only() {
        assert_eq!(gpu_words("RTX 4090, rtx-pro; H200"), vec!["h200", "rtx"]);
        assert!(
            gpu_words("tasks like L4D2 or attention t4x").is_empty(),
            "parts of words are not GPU names"
        );
        assert_eq!(
            hardware_note("CPU servers like this machine", &cpu_environment()),
            None
        );
    }
}
