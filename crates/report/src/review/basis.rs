//! What a capacity review rests on besides the runs: the question (the traffic and the growth
//! planned for), the scenario's provenance and the sweep's settings, and the sensitivity run.
//! Plain data that a sweep stores in `sweep.json` (its `review`), so that `capsim report` redraws
//! the same documents; the documents and the sensitivity run are in [`super`].

use std::path::Path;

use capsim_sim::Scenario;
use capsim_sim::scenario::ServiceSpec;
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
const OVERHEAD_KEYS: [&str; 8] = [
    "network.latency",
    "network.bandwidth",
    "gateway.overhead",
    "preprocess.workers",
    "preprocess.base",
    "preprocess.per_input_token",
    "postprocess.base",
    "postprocess.per_output_token",
];

impl Basis {
    /// The provenance of `scenario`, read from `path` (the file's leading comments tell a fitted
    /// scenario: the header `capsim fit` writes, or a line saying the model is `capsim fit`'s).
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
        let (mut service_source, service) = service_words(scenario, path);
        if fitted && service_source == ServiceSource::Unmeasured {
            service_source = ServiceSource::Fitted;
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

/// The default pool's service-time model in words, and where it came from.
fn service_words(scenario: &Scenario, path: &Path) -> (ServiceSource, String) {
    let Some(pool) = scenario.pools().first() else {
        return (ServiceSource::Unmeasured, "no pool".to_string());
    };
    let ms = |ns: u64| format!("{} ms", trim(ns as f64 / 1e6));
    if pool.llm.is_some() {
        let kind = scenario
            .get("step_time.kind")
            .and_then(|v| v.as_str())
            .unwrap_or("linear");
        return match kind {
            "profile" => (
                ServiceSource::Calibrated,
                format!(
                    "step times from the decoder profile {}",
                    scenario.get("step_time.path").map_or(String::new(), |v| v.to_string())
                ),
            ),
            "roofline" => (
                ServiceSource::Unmeasured,
                "step times from an analytic roofline of the model on the GPU, with assumed efficiencies".to_string(),
            ),
            _ => (
                ServiceSource::Unmeasured,
                "step times from a linear model written in the scenario".to_string(),
            ),
        };
    }
    match &pool.service_spec {
        Some(ServiceSpec::Affine { a, b, c, residuals }) => (
            ServiceSource::Unmeasured,
            format!(
                "affine: {} per batch + {} per request + {} µs per padded input token (batch size × longest input){}",
                ms(a.0),
                ms(b.0),
                trim(c.0 as f64 / 1e3),
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
        Some(ServiceSpec::Profile { path: profile }) => {
            let full = path.parent().map_or(profile.clone(), |d| d.join(profile));
            match capsim_sim::timing::profile::Profile::read(&full) {
                Ok(p) => (
                    ServiceSource::Calibrated,
                    format!(
                        "calibrated profile {}: measured on {} ({} through ONNX Runtime {}, {}) on {}; its affine fit has R² {:.3}",
                        profile.display(),
                        p.environment.device_name,
                        p.environment.execution_provider,
                        p.environment.ort_version,
                        p.environment.cpu_model,
                        p.environment.date,
                        p.fit.r_squared
                    ),
                ),
                Err(e) => (
                    ServiceSource::Calibrated,
                    format!("calibrated profile {} ({e})", profile.display()),
                ),
            }
        }
        None => (ServiceSource::Unmeasured, "none".to_string()),
    }
}

/// `value` with at most three decimals and no trailing zeros.
pub(super) fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}
