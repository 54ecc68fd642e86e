//! The summary's figures under the names other benchmark tools write, so that a script written
//! for their result files reads capsim's `summary.json` as well: `compat.vllm` has the keys of
//! vLLM's `vllm bench serve --save-result` file (`mean_ttft_ms`, `p99_e2el_ms`,
//! `request_throughput`, ...; milliseconds), `compat.inference_perf` the shape of inference-perf's
//! `summary_lifecycle_metrics.json` (`successes.latency.time_to_first_token.p99`, ...; seconds).
//!
//! Every value is one of the summary's own figures, renamed and converted, never a second
//! computation: `median_ttft_ms` is `latency_ms.ttft.p50_ms`, `request_throughput` is
//! `throughput_rps`. Percentiles are therefore HdrHistogram's (3 significant digits), where the
//! tools interpolate between samples with numpy; means, minima, maxima and standard deviations
//! are exact. Runs without token latencies (a classifier behind a dynamic batcher) write the
//! end-to-end latency and the request and input-token rates only, as vLLM's benchmark does for
//! pooling models. See docs/scenario.md ("Other tools' names").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::latency::LatencyStats;

/// The summary under other tools' names (`summary.json`'s `compat`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Compat {
    /// vLLM's benchmark result keys (`vllm bench serve`, formerly
    /// `benchmarks/benchmark_serving.py`), in milliseconds and per second.
    pub vllm: Map<String, Value>,
    /// inference-perf's `summary_lifecycle_metrics.json` (`benchmark_time_seconds`, `successes`,
    /// `failures`), in seconds and per second.
    pub inference_perf: Map<String, Value>,
}

/// What the compatibility names are made from: the summary's measured figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures<'a> {
    /// Latency statistics by the summary's keys (`end_to_end`, `ttft`, `tpot`, `itl`,
    /// `normalized`).
    pub latency_ms: &'a BTreeMap<String, LatencyStats>,
    /// From the first measured arrival to the last measured response, in seconds.
    pub span_s: f64,
    /// Measured attempts.
    pub total: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Input tokens of the completed requests.
    pub input_tokens: u64,
    /// Output tokens of the completed requests.
    pub output_tokens: u64,
    /// Completed requests within every SLO bound, when the scenario sets one.
    pub good: Option<u64>,
}

/// Reads one statistic, in milliseconds.
type Stat = fn(&LatencyStats) -> f64;

/// vLLM's and inference-perf's name for each percentile written (besides the median).
const PERCENTILES: [(&str, Stat); 4] = [
    ("90", |s| s.p90_ms),
    ("95", |s| s.p95_ms),
    ("99", |s| s.p99_ms),
    ("99.9", |s| s.p999_ms),
];

/// vLLM's metric names for the summary's latency keys, in vLLM's order; the first three only
/// with token latencies.
const VLLM_METRICS: [(&str, &str); 4] = [
    ("ttft", "ttft"),
    ("tpot", "tpot"),
    ("itl", "itl"),
    ("e2el", "end_to_end"),
];

/// inference-perf's latency names for the summary's latency keys.
const INFERENCE_PERF_METRICS: [(&str, &str); 5] = [
    ("request_latency", "end_to_end"),
    ("normalized_time_per_output_token", "normalized"),
    ("time_per_output_token", "tpot"),
    ("time_to_first_token", "ttft"),
    ("inter_token_latency", "itl"),
];

impl Compat {
    /// Both tools' names for `figures`.
    pub(crate) fn of(figures: &Figures) -> Compat {
        Compat {
            vllm: vllm(figures),
            inference_perf: inference_perf(figures),
        }
    }
}

fn per_s(n: u64, span_s: f64) -> f64 {
    if span_s > 0.0 { n as f64 / span_s } else { 0.0 }
}

/// Milliseconds (rounded to the nanosecond) to seconds, without binary noise past the
/// nanosecond.
fn ms_to_s(ms: f64) -> f64 {
    (ms * 1e6).round() / 1e9
}

fn vllm(f: &Figures) -> Map<String, Value> {
    let tokens = f.latency_ms.contains_key("ttft");
    let mut out = Map::new();
    out.insert("duration".into(), json!(f.span_s));
    out.insert("completed".into(), json!(f.completed));
    out.insert("failed".into(), json!(f.total - f.completed));
    out.insert("total_input_tokens".into(), json!(f.input_tokens));
    out.insert(
        "request_throughput".into(),
        json!(per_s(f.completed, f.span_s)),
    );
    out.insert(
        "request_goodput".into(),
        json!(f.good.map(|good| per_s(good, f.span_s))),
    );
    let total_tokens = if tokens {
        out.insert("total_output_tokens".into(), json!(f.output_tokens));
        out.insert(
            "output_throughput".into(),
            json!(per_s(f.output_tokens, f.span_s)),
        );
        f.input_tokens + f.output_tokens
    } else {
        f.input_tokens
    };
    out.insert(
        "total_token_throughput".into(),
        json!(per_s(total_tokens, f.span_s)),
    );
    for (name, key) in VLLM_METRICS {
        let Some(stats) = f.latency_ms.get(key) else {
            continue;
        };
        out.insert(format!("mean_{name}_ms"), json!(stats.mean_ms));
        out.insert(format!("median_{name}_ms"), json!(stats.p50_ms));
        out.insert(format!("std_{name}_ms"), json!(stats.std_ms));
        for (p, value) in PERCENTILES {
            out.insert(format!("p{p}_{name}_ms"), json!(value(stats)));
        }
    }
    out
}

/// inference-perf's `summarize`: mean, min, max, median and percentiles in seconds; `null` for
/// no values (as inference-perf writes for a metric nothing measured).
fn inference_perf_stats(stats: Option<&LatencyStats>) -> Value {
    let Some(stats) = stats.filter(|s| s.count > 0) else {
        return Value::Null;
    };
    let mut out = Map::new();
    out.insert("mean".into(), json!(ms_to_s(stats.mean_ms)));
    out.insert("min".into(), json!(ms_to_s(stats.min_ms)));
    out.insert("max".into(), json!(ms_to_s(stats.max_ms)));
    out.insert("median".into(), json!(ms_to_s(stats.p50_ms)));
    for (p, value) in PERCENTILES {
        out.insert(format!("p{p}"), json!(ms_to_s(value(stats))));
    }
    Value::Object(out)
}

fn inference_perf(f: &Figures) -> Map<String, Value> {
    // Output tokens count where a model generates them, as in `vllm`: a classifier's trace may
    // carry output sizes (the response's), which are not generated tokens.
    let output_tokens = if f.latency_ms.contains_key("ttft") {
        f.output_tokens
    } else {
        0
    };
    let latency: Map<String, Value> = INFERENCE_PERF_METRICS
        .iter()
        .map(|&(name, key)| {
            (
                name.to_string(),
                inference_perf_stats(f.latency_ms.get(key)),
            )
        })
        .collect();
    let mut successes = Map::new();
    successes.insert("count".into(), json!(f.completed));
    successes.insert("latency".into(), Value::Object(latency));
    successes.insert(
        "throughput".into(),
        json!({
            "input_tokens_per_sec": per_s(f.input_tokens, f.span_s),
            "output_tokens_per_sec": per_s(output_tokens, f.span_s),
            "total_tokens_per_sec": per_s(f.input_tokens + output_tokens, f.span_s),
            "requests_per_sec": per_s(f.completed, f.span_s),
        }),
    );
    if let Some(good) = f.good {
        let percentage = if f.completed == 0 {
            0.0
        } else {
            good as f64 / f.completed as f64 * 100.0
        };
        successes.insert(
            "goodput_metrics".into(),
            json!({
                "request_goodput": per_s(good, f.span_s),
                "good_requests": good,
                "total_requests": f.completed,
                "goodput_percentage": percentage,
            }),
        );
    }
    let mut out = Map::new();
    out.insert("benchmark_time_seconds".into(), json!(f.span_s));
    out.insert("successes".into(), Value::Object(successes));
    out.insert("failures".into(), json!({ "count": f.total - f.completed }));
    out
}
