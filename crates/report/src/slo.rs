//! Service-level objectives: `e2e.p99<=800ms`, several joined by `,` or `&&`.
//!
//! An objective names a latency metric of the run summary (`e2e`, `queue`, ...), a statistic
//! (`p50`, `p99`, `p99.9`, `mean`, `max`) and an upper bound with a unit, inclusive (`<=`) or
//! strict (`<`). An [`Slo`] holds when every objective holds. [`Slo::check_against`] refuses an
//! SLO on a metric the scenario does not produce, before anything runs.

use std::fmt;
use std::str::FromStr;

use capsim_sim::Scenario;
use capsim_sim::quantity::parse_duration_ns;
use capsim_trace::closest;
use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// A latency metric an objective may name: a stage of the run summary (`summary.json`'s
/// `latency_ms` keys), with `e2e` short for `end_to_end`, or a token latency of continuous
/// batching (`ttft`, `tpot`, `itl`, and `normalized` in ms per output token).
///
/// Parsed once from its name ([`FromStr`]); [`Display`](fmt::Display) and serde write the name
/// back as written, so `e2e` and `end_to_end` stay distinct in text although they read the same
/// summary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// End-to-end latency, written `e2e` (summary key `end_to_end`).
    E2e,
    /// End-to-end latency, written `end_to_end`.
    EndToEnd,
    /// The uplink: network latency and transfer of the input.
    NetworkIn,
    /// The gateway's overhead.
    Gateway,
    /// Pre-processing, waiting included.
    Preprocess,
    /// The instance queue.
    Queue,
    /// Model execution.
    Execution,
    /// Post-processing.
    Postprocess,
    /// The downlink: network latency and transfer of the output.
    NetworkOut,
    /// Time to first token (continuous batching).
    Ttft,
    /// Time per output token (continuous batching).
    Tpot,
    /// Inter-token latency, every gap (continuous batching).
    Itl,
    /// End-to-end latency over output tokens, ms per token (continuous batching).
    Normalized,
}

impl Metric {
    /// Every metric, in the order error messages list them.
    pub const ALL: [Metric; 13] = [
        Metric::E2e,
        Metric::EndToEnd,
        Metric::NetworkIn,
        Metric::Gateway,
        Metric::Preprocess,
        Metric::Queue,
        Metric::Execution,
        Metric::Postprocess,
        Metric::NetworkOut,
        Metric::Ttft,
        Metric::Tpot,
        Metric::Itl,
        Metric::Normalized,
    ];

    /// The stages of the serving path, in path order, as the run summary names them
    /// ([`capsim_sim::summary::STAGES`]): end to end first.
    pub const STAGES: [Metric; 8] = [
        Metric::EndToEnd,
        Metric::NetworkIn,
        Metric::Gateway,
        Metric::Preprocess,
        Metric::Queue,
        Metric::Execution,
        Metric::Postprocess,
        Metric::NetworkOut,
    ];

    /// The name as written in an SLO (`e2e`, `queue`, `ttft`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Metric::E2e => "e2e",
            Metric::EndToEnd => "end_to_end",
            Metric::NetworkIn => "network_in",
            Metric::Gateway => "gateway",
            Metric::Preprocess => "preprocess",
            Metric::Queue => "queue",
            Metric::Execution => "execution",
            Metric::Postprocess => "postprocess",
            Metric::NetworkOut => "network_out",
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::Normalized => "normalized",
        }
    }

    /// The run summary's `latency_ms` key of this metric: its name, except `end_to_end` for
    /// `e2e`.
    pub fn summary_key(self) -> &'static str {
        match self {
            Metric::E2e => Metric::EndToEnd.name(),
            other => other.name(),
        }
    }

    /// Whether this is the end-to-end latency (`e2e` or `end_to_end`).
    pub fn is_end_to_end(self) -> bool {
        matches!(self, Metric::E2e | Metric::EndToEnd)
    }

    /// Whether this is a token latency, which only continuous batching produces.
    pub fn is_token_latency(self) -> bool {
        matches!(
            self,
            Metric::Ttft | Metric::Tpot | Metric::Itl | Metric::Normalized
        )
    }

    /// The valid names, joined by `, ` (for error messages).
    fn names() -> String {
        Metric::ALL
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// "unknown metric `x`", with the closest known name when one is close, and every name.
    fn unknown(text: &str) -> String {
        let hint = closest(text, Metric::ALL.iter().map(|m| m.name()))
            .map(|name| format!("; did you mean `{name}`?"))
            .unwrap_or_default();
        format!(
            "unknown metric `{text}`{hint} (known metrics: {})",
            Metric::names()
        )
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = ParseError;

    /// The metric named `text` exactly; the error names it and lists every valid name.
    fn from_str(text: &str) -> Result<Metric, ParseError> {
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == text)
            .ok_or_else(|| ParseError::new("SLO metric", text, Metric::unknown(text)))
    }
}

/// Percentiles the run summary reports, which an objective may bound.
pub const REPORTED_PERCENTILES: &[f64] = &[50.0, 90.0, 95.0, 99.0, 99.9];

/// The statistic of a latency distribution an objective bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencyStat {
    /// The arithmetic mean.
    Mean,
    /// The largest value seen.
    Max,
    /// A percentile in (0, 100), e.g. 99.0 for `p99`, 99.9 for `p99.9` or `p999`.
    Percentile(f64),
}

impl LatencyStat {
    /// The percentile in (0, 100] this statistic reads (`max` is 100), or `None` for the mean.
    pub fn percentile(self) -> Option<f64> {
        match self {
            LatencyStat::Mean => None,
            LatencyStat::Max => Some(100.0),
            LatencyStat::Percentile(p) => Some(p),
        }
    }

    fn parse(text: &str) -> Option<LatencyStat> {
        match text {
            "mean" => return Some(LatencyStat::Mean),
            "max" => return Some(LatencyStat::Max),
            _ => {}
        }
        let digits = text.strip_prefix('p')?;
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return None;
        }
        // `p999` means 99.9 and `p9999` 99.99, as in latency dashboards; `p99.9` is explicit.
        let percentile = if !digits.contains('.') && digits.len() > 2 && digits.starts_with("99") {
            let (whole, fraction) = digits.split_at(2);
            format!("{whole}.{fraction}").parse().ok()?
        } else {
            digits.parse().ok()?
        };
        REPORTED_PERCENTILES
            .contains(&percentile)
            .then_some(LatencyStat::Percentile(percentile))
    }
}

impl fmt::Display for LatencyStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LatencyStat::Mean => write!(f, "mean"),
            LatencyStat::Max => write!(f, "max"),
            LatencyStat::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

/// One bound: `metric.stat <= bound`, or `metric.stat < bound` when strict.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// The latency bounded.
    pub metric: Metric,
    /// The statistic bounded.
    pub stat: LatencyStat,
    /// The bound, in nanoseconds: the largest allowed value, or with [`Objective::strict`] the
    /// smallest value refused.
    pub bound_ns: u64,
    /// Written `<`: a value equal to the bound fails.
    pub strict: bool,
}

impl Objective {
    /// Whether a measured value, in nanoseconds, meets the bound (strictly below it when
    /// [`Objective::strict`]).
    pub fn holds(&self, value_ns: f64) -> bool {
        let bound = self.bound_ns as f64;
        if self.strict {
            value_ns < bound
        } else {
            value_ns <= bound
        }
    }

    /// The comparison as written: `<=` or `<`.
    pub fn comparison(&self) -> &'static str {
        if self.strict { "<" } else { "<=" }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}{}{}ms",
            self.metric,
            self.stat,
            self.comparison(),
            self.bound_ns as f64 / 1e6
        )
    }
}

/// A service-level objective: every [`Objective`] must hold. Never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    objectives: Vec<Objective>,
}

impl Slo {
    /// The objectives, in the order written.
    pub fn objectives(&self) -> &[Objective] {
        &self.objectives
    }

    /// The first objective, which plots draw as the SLO line.
    pub fn primary(&self) -> &Objective {
        &self.objectives[0]
    }

    /// Refuses an objective on a metric no run of `scenario` reports (a token latency without a
    /// continuous batcher, or a stage the scenario does not model), naming the metrics it can
    /// report. Without this check such an SLO fails at every load and the capacity reads 0.
    pub fn check_against(&self, scenario: &Scenario) -> Result<(), ParseError> {
        let keys = capsim_sim::latency_keys(scenario);
        let Some(missing) = self
            .objectives
            .iter()
            .find(|o| !keys.contains(&o.metric.summary_key()))
        else {
            return Ok(());
        };
        let metric = missing.metric;
        let why = if metric.is_token_latency() {
            "token latencies (ttft, tpot, itl, normalized) come only from a continuous batcher (`batcher.kind = \"continuous\"`)".to_string()
        } else {
            format!("the scenario does not model the {metric} stage (it takes no time there)")
        };
        let reported: Vec<&str> = Metric::ALL
            .iter()
            .filter(|m| keys.contains(&m.summary_key()))
            .map(|m| m.name())
            .collect();
        Err(ParseError::new(
            "SLO",
            &self.to_string(),
            format!(
                "scenario `{}` reports no `{metric}`: {why}; bound one of the metrics it reports: {}",
                scenario.name,
                reported.join(", ")
            ),
        ))
    }

    /// Whether every objective holds, reading each measured value with `value_ns(metric, stat)`.
    /// A value the reader cannot supply (`None`) fails the objective.
    pub fn holds(&self, mut value_ns: impl FnMut(Metric, LatencyStat) -> Option<f64>) -> bool {
        self.objectives.iter().all(|objective| {
            value_ns(objective.metric, objective.stat).is_some_and(|value| objective.holds(value))
        })
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, objective) in self.objectives.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{objective}")?;
        }
        Ok(())
    }
}

impl FromStr for Slo {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Slo, ParseError> {
        if text.contains(';') {
            return Err(ParseError::new(
                "SLO",
                text,
                "`;` does not join objectives: join objectives with `,`, e.g. `e2e.p99<=800ms,queue.mean<=20ms`",
            ));
        }
        let objectives = text
            .split([',', '&'])
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| parse_objective(text, part))
            .collect::<Result<Vec<_>, _>>()?;
        if objectives.is_empty() {
            return Err(ParseError::new(
                "SLO",
                text,
                "no objective; write e.g. `e2e.p99<=800ms`",
            ));
        }
        Ok(Slo { objectives })
    }
}

fn parse_objective(whole: &str, part: &str) -> Result<Objective, ParseError> {
    let error = |reason: String| ParseError::new("SLO", whole, reason);
    let (lhs, bound, strict) = match part.split_once("<=") {
        Some((lhs, bound)) => (lhs, bound, false),
        None => part
            .split_once('<')
            .map(|(lhs, bound)| (lhs, bound, true))
            .ok_or_else(|| error(format!("`{part}` has no `<=`; write e.g. `e2e.p99<=800ms`")))?,
    };
    let (metric, stat) = lhs.trim().split_once('.').ok_or_else(|| {
        error(format!(
            "`{lhs}` must be metric.statistic, e.g. `e2e.p99` or `queue.mean`"
        ))
    })?;
    let metric: Metric = metric.parse().map_err(|_| error(Metric::unknown(metric)))?;
    let stat = LatencyStat::parse(stat).ok_or_else(|| error(unknown_stat(stat)))?;
    let bound_ns = parse_duration_ns(bound).map_err(|e| error(e.to_string()))?;
    Ok(Objective {
        metric,
        stat,
        bound_ns,
        strict,
    })
}

/// "unknown statistic `x`", with the closest reported one when one is close.
fn unknown_stat(text: &str) -> String {
    const STATS: [&str; 8] = ["p50", "p90", "p95", "p99", "p99.9", "p999", "mean", "max"];
    let hint = closest(text, STATS)
        .map(|name| format!("; did you mean `{name}`?"))
        .unwrap_or_default();
    format!(
        "unknown statistic `{text}`{hint} (the summary reports p50, p90, p95, p99, p99.9 (or p999), mean and max)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_objective_parses_metric_stat_and_bound() {
        let slo: Slo = "e2e.p99<=800ms".parse().unwrap();
        assert_eq!(
            slo.objectives(),
            &[Objective {
                metric: Metric::E2e,
                stat: LatencyStat::Percentile(99.0),
                bound_ns: 800_000_000,
                strict: false,
            }]
        );
    }

    #[test]
    fn joined_objectives_all_parse() {
        let slo: Slo = "e2e.p99<=800ms, queue.mean<=20ms && execution.p999<=1.5s"
            .parse()
            .unwrap();
        let objectives = slo.objectives();
        assert_eq!(objectives.len(), 3);
        assert_eq!(objectives[1].metric, Metric::Queue);
        assert_eq!(objectives[1].stat, LatencyStat::Mean);
        assert_eq!(objectives[2].stat, LatencyStat::Percentile(99.9));
        assert_eq!(objectives[2].bound_ns, 1_500_000_000);
    }

    #[test]
    fn slo_holds_only_when_every_objective_holds() {
        let slo: Slo = "e2e.p99<=800ms,queue.p50<=10ms".parse().unwrap();
        let ok = |metric: Metric, _stat: LatencyStat| match metric {
            Metric::E2e => Some(800e6),
            _ => Some(10e6),
        };
        assert!(slo.holds(ok));
        let queue_too_slow = |metric: Metric, _stat: LatencyStat| match metric {
            Metric::E2e => Some(700e6),
            _ => Some(10.5e6),
        };
        assert!(!slo.holds(queue_too_slow));
        assert!(!slo.holds(|_, _| None), "a missing value must fail the SLO");
    }

    #[test]
    fn bad_slos_quote_the_bad_value() {
        let cases = [
            ("e2e.p99", "<="),
            ("latency.p99<=800ms", "latency"),
            ("e2e.p100<=800ms", "p100"),
            ("e2e.p97<=800ms", "p97"),
            ("e2e.q99<=800ms", "q99"),
            ("e2e.p99<=800", "800"),
            ("e2e.p99<=5 parsecs", "parsecs"),
            ("e2ep99<=800ms", "e2ep99"),
            ("", "no objective"),
        ];
        for (text, quoted) in cases {
            let err = text.parse::<Slo>().unwrap_err().to_string();
            assert!(
                err.contains(quoted),
                "error `{err}` should mention `{quoted}`"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        let slo: Slo = "e2e.p99<=800ms,queue.mean<=2.5ms".parse().unwrap();
        let again: Slo = slo.to_string().parse().unwrap();
        assert_eq!(slo, again);
    }

    #[test]
    fn metric_names_round_trip_and_stages_match_the_summary() {
        for metric in Metric::ALL {
            assert_eq!(metric.name().parse::<Metric>(), Ok(metric));
            let json = serde_json::to_string(&metric).unwrap();
            assert_eq!(json, format!("\"{}\"", metric.name()));
        }
        let keys: Vec<&str> = Metric::STAGES.iter().map(|m| m.summary_key()).collect();
        assert_eq!(keys, capsim_sim::summary::STAGES);
        assert_eq!(Metric::E2e.summary_key(), "end_to_end");
        let tokens = [Metric::Ttft, Metric::Tpot, Metric::Itl, Metric::Normalized];
        let token_keys: Vec<&str> = tokens.iter().map(|m| m.summary_key()).collect();
        assert_eq!(token_keys, capsim_sim::summary::TOKEN_METRICS);
    }

    #[test]
    fn unknown_metric_error_names_it_and_lists_the_valid_ones() {
        let err = "latency".parse::<Metric>().unwrap_err().to_string();
        assert!(
            err.contains("`latency`")
                && err.contains("e2e, end_to_end")
                && err.contains("normalized"),
            "error `{err}` should quote the name and list the metrics"
        );
    }

    #[test]
    fn a_strict_bound_refuses_the_bound_itself_and_prints_back_as_strict() {
        let strict: Slo = "e2e.p99<100ms".parse().unwrap();
        let inclusive: Slo = "e2e.p99<=100ms".parse().unwrap();
        assert!(strict.objectives()[0].strict && !inclusive.objectives()[0].strict);
        let at_bound = |_: Metric, _: LatencyStat| Some(100e6);
        assert!(!strict.holds(at_bound), "100ms is not < 100ms");
        assert!(inclusive.holds(at_bound));
        assert!(strict.holds(|_, _| Some(99.9e6)));
        assert_eq!(strict.to_string(), "e2e.p99<100ms");
        assert_eq!(strict.to_string().parse::<Slo>().unwrap(), strict);
    }

    #[test]
    fn a_semicolon_between_objectives_says_to_join_them_with_a_comma() {
        let err = "e2e.p99<=100ms;ttft.p99<=1s"
            .parse::<Slo>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("join objectives with `,`"), "{err}");
    }

    #[test]
    fn misspelt_metrics_and_statistics_get_a_did_you_mean() {
        let cases = [
            ("ttf.p99<=1s", "did you mean `ttft`?"),
            ("e2f.p99<=1s", "did you mean `e2e`?"),
            ("queu.mean<=1s", "did you mean `queue`?"),
            ("e2e.p9999<=1s", "did you mean `p99.9`?"),
            ("e2e.maxx<=1s", "did you mean `max`?"),
        ];
        for (text, hint) in cases {
            let err = text.parse::<Slo>().unwrap_err().to_string();
            assert!(err.contains(hint), "error `{err}` should say {hint}");
        }
        let err = "latency.p99<=1s".parse::<Slo>().unwrap_err().to_string();
        assert!(!err.contains("did you mean"), "{err}");
    }

    fn scenario(text: &str) -> Scenario {
        Scenario::from_toml_str(text).unwrap()
    }

    #[test]
    fn an_slo_on_a_metric_the_scenario_cannot_report_is_refused_naming_those_it_can() {
        let dynamic = scenario(
            "name = \"bert\"\n[gateway]\noverhead = \"50us\"\n[service]\nkind = \"constant\"\ntime = \"5ms\"\n",
        );
        let slo: Slo = "e2e.p99<=1s,ttft.p99<=2s".parse().unwrap();
        let err = slo.check_against(&dynamic).unwrap_err().to_string();
        assert!(
            err.contains("reports no `ttft`")
                && err.contains("continuous batcher")
                && err.ends_with("metrics it reports: e2e, end_to_end, gateway, queue, execution"),
            "{err}"
        );
        let err = "preprocess.p99<=1s"
            .parse::<Slo>()
            .unwrap()
            .check_against(&dynamic)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not model the preprocess stage"), "{err}");
        for ok in ["e2e.p99<=1s", "gateway.mean<=1ms,queue.p99<=5ms"] {
            let slo: Slo = ok.parse().unwrap();
            assert!(slo.check_against(&dynamic).is_ok(), "{ok}");
        }
        let continuous = scenario(
            "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n",
        );
        let slo: Slo = "ttft.p99<=2s,tpot.p99<=100ms".parse().unwrap();
        assert!(slo.check_against(&continuous).is_ok());
    }
}
