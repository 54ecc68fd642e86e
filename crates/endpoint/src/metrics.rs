//! The server's own Prometheus metrics, scraped while the replay runs: Triton's `nv_inference_*`
//! counters (requests, executions, queue and compute time) and vLLM's `vllm:*` gauges and
//! counters, parsed with `prometheus-parse`.

use std::collections::BTreeMap;

/// Metric name prefixes kept; others (process, GPU, Python runtime) are left out.
pub const PREFIXES: [&str; 2] = ["nv_inference_", "vllm:"];

/// How a metric's values combine over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only grows: the run's share is the last value minus the first.
    Counter,
    /// A level: the run's figure is the mean of the scrapes.
    Gauge,
}

/// One scrape: when (on the trace's timeline, in nanoseconds) and each kept metric's value,
/// summed over its label sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Scrape {
    /// When it was taken, in nanoseconds on the trace's timeline.
    pub at_ns: u64,
    /// Metric name to kind and value.
    pub values: BTreeMap<String, (Kind, f64)>,
}

/// Parses Prometheus text `text`, keeping [`PREFIXES`] metrics whose `model` label (if any)
/// is `model`. Histogram and summary families count by their `_sum` and `_count` lines.
pub fn parse(text: &str, model: &str) -> Result<BTreeMap<String, (Kind, f64)>, String> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).map_err(|e| e.to_string())?;
    let mut values: BTreeMap<String, (Kind, f64)> = BTreeMap::new();
    for sample in scrape.samples {
        if !PREFIXES.iter().any(|p| sample.metric.starts_with(p)) {
            continue;
        }
        let label_model = sample
            .labels
            .get("model")
            .or_else(|| sample.labels.get("model_name"));
        if label_model.is_some_and(|m| m != model) {
            continue;
        }
        let counter_name = ["_total", "_count", "_sum"]
            .iter()
            .any(|s| sample.metric.ends_with(s));
        let (kind, value) = match sample.value {
            prometheus_parse::Value::Counter(v) => (Kind::Counter, v),
            prometheus_parse::Value::Gauge(v) => (Kind::Gauge, v),
            prometheus_parse::Value::Untyped(v) if counter_name => (Kind::Counter, v),
            prometheus_parse::Value::Untyped(v) => (Kind::Gauge, v),
            prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => continue,
        };
        if !value.is_finite() {
            continue;
        }
        let entry = values.entry(sample.metric).or_insert((kind, 0.0));
        entry.1 += value;
    }
    Ok(values)
}

/// The run's figure of each metric: a counter's increase from the first scrape to the last, a
/// gauge's mean over the scrapes that have it.
pub fn summarize(scrapes: &[Scrape]) -> BTreeMap<String, f64> {
    let mut first: BTreeMap<&str, (Kind, f64)> = BTreeMap::new();
    let mut last: BTreeMap<&str, f64> = BTreeMap::new();
    let mut sums: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for scrape in scrapes {
        for (name, &(kind, value)) in &scrape.values {
            first.entry(name).or_insert((kind, value));
            last.insert(name, value);
            let sum = sums.entry(name).or_insert((0.0, 0));
            sum.0 += value;
            sum.1 += 1;
        }
    }
    first
        .into_iter()
        .map(|(name, (kind, start))| {
            let figure = match kind {
                Kind::Counter => last[name] - start,
                Kind::Gauge => sums[name].0 / f64::from(sums[name].1),
            };
            (name.to_string(), figure)
        })
        .collect()
}

/// Each metric's latest scraped value at each of `row_end_ns` (NaN before its first scrape).
pub fn columns(scrapes: &[Scrape], row_end_ns: &[u64]) -> BTreeMap<String, Vec<f64>> {
    let mut columns: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for name in scrapes.iter().flat_map(|s| s.values.keys()) {
        columns
            .entry(name.clone())
            .or_insert_with(|| vec![f64::NAN; row_end_ns.len()]);
    }
    for (row, &end) in row_end_ns.iter().enumerate() {
        if let Some(scrape) = scrapes.iter().rev().find(|s| s.at_ns <= end) {
            for (name, &(_, value)) in &scrape.values {
                columns.get_mut(name).expect("every name has a column")[row] = value;
            }
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRITON: &str = "# HELP nv_inference_request_success Number of successful inference requests\n\
        # TYPE nv_inference_request_success counter\n\
        nv_inference_request_success{model=\"fixed\",version=\"1\"} 40\n\
        nv_inference_request_success{model=\"other\",version=\"1\"} 7\n\
        # TYPE nv_inference_pending_request_count gauge\n\
        nv_inference_pending_request_count{model=\"fixed\",version=\"1\"} 3\n\
        # TYPE process_cpu_seconds_total counter\n\
        process_cpu_seconds_total 9\n";

    #[test]
    fn only_the_models_server_metrics_are_kept_summed_over_label_sets() {
        let values = parse(TRITON, "fixed").unwrap();
        assert_eq!(
            values.get("nv_inference_request_success"),
            Some(&(Kind::Counter, 40.0))
        );
        assert_eq!(
            values.get("nv_inference_pending_request_count"),
            Some(&(Kind::Gauge, 3.0))
        );
        assert_eq!(values.len(), 2, "{values:?}");
    }

    #[test]
    fn a_counter_reports_its_increase_a_gauge_its_mean_and_columns_the_latest_value() {
        let scrape = |at_ns, success: f64, pending: f64| Scrape {
            at_ns,
            values: BTreeMap::from([
                ("s".to_string(), (Kind::Counter, success)),
                ("p".to_string(), (Kind::Gauge, pending)),
            ]),
        };
        let scrapes = [
            scrape(0, 10.0, 1.0),
            scrape(10, 25.0, 3.0),
            scrape(20, 40.0, 2.0),
        ];
        let figures = summarize(&scrapes);
        assert_eq!(figures["s"], 30.0);
        assert_eq!(figures["p"], 2.0);
        let cols = columns(&scrapes[1..], &[5, 15, 25]);
        assert!(cols["s"][0].is_nan(), "before the first scrape");
        assert_eq!(&cols["s"][1..], &[25.0, 40.0]);
    }
}
