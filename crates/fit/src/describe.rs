//! The LLM fit's text, as `capsim fit` prints it: what was fitted or predicted, the bootstrap's
//! intervals, what makes a fit untrustworthy, and the fitted scenario file's header.

use std::path::Path;

use crate::{Comparison, Figures, FitResult, Interval, MeasuredLog, parameter_unit};

impl FitResult {
    /// The fit's text: the log read, the parameters with their start spread, the table of
    /// figures, and the client's submission delay when the log has one.
    pub fn describe(&self, log_path: &Path, log: &MeasuredLog) -> String {
        let mut out = format!(
            "fit: {} requests of {} ({}); {} iterations, loss {:.3e}, {}\n",
            log.len(),
            log_path.display(),
            log.format,
            self.iterations,
            self.loss,
            if self.converged {
                "converged"
            } else {
                "NOT converged (ran out of iterations): do not trust the parameters"
            }
        );
        if let Some(excluded) = log.excluded_summary() {
            out.push_str(&format!("left out of the log: {excluded}\n"));
        }
        out.push_str(&format!(
            "  {:<30} {:>17} {:>14}\n",
            "parameter", "value", "start spread"
        ));
        for (p, spread) in self.parameters.iter().zip(&self.start_spread) {
            out.push_str(&format!(
                "  {:<30} {:>14.3} {:<2} {:>13.2}x{}\n",
                p.key,
                p.value,
                parameter_unit(p.key),
                spread,
                if p.at_bound {
                    format!(
                        "   AT A BOUND ({:e}..{:e}): the model cannot place it",
                        p.bounds.0, p.bounds.1
                    )
                } else {
                    String::new()
                }
            ));
        }
        out.push_str(&self.table());
        if !log.submit_delay_ns.is_empty() {
            let delays: Vec<f64> = log.submit_delay_ns.iter().map(|&d| d as f64).collect();
            let f = Figures::of_ns(&delays);
            out.push_str(&format!(
                "latencies count from the server's queued_ts; the client's submission delay \
                 before it (clocks aligned by the first request): mean {:.1} ms, p50 {:.1} ms, \
                 p90 {:.1} ms\n",
                f.mean_ms, f.p50_ms, f.p90_ms
            ));
        }
        out
    }

    /// What makes the fit untrustworthy: no convergence, parameters on a bound.
    pub fn warnings(&self) -> Vec<String> {
        untrusted(
            "the fit",
            "the log",
            self.converged,
            self.iterations,
            self.parameters.iter().filter(|p| p.at_bound).map(|p| {
                let value = format!("{:.3}", p.value);
                (p.key.to_string(), value, p.key, p.bounds)
            }),
        )
    }

    /// The header of the fitted scenario's TOML: the command that fitted it (scenario, log and
    /// seed), its worst error, and a `# WARNING:` line for each of [`FitResult::warnings`].
    pub fn toml_header(&self, scenario_path: &Path, log_path: &Path, seed: u64) -> String {
        let mut header = format!(
            "# Fitted by `capsim fit --scenario {} --log {}` (seed {}): step time and \
             step_overhead\n\
             # from the log's TTFT, TPOT and end-to-end mean, p50 and p90 (worst error {:.1}%).\n",
            scenario_path.display(),
            log_path.display(),
            seed,
            self.worst_error() * 100.0,
        );
        for warning in self.warnings() {
            header.push_str(&format!("# WARNING: {warning}\n"));
        }
        header
    }
}

impl Comparison {
    /// The comparison's text: what was replayed (the log at `log_path` through the scenario at
    /// `scenario_path`), the table, and what it is evidence of.
    pub fn describe(&self, log_path: &Path, scenario_path: &Path, log: &MeasuredLog) -> String {
        let mut out = format!(
            "predict: {} requests of {} ({}) replayed through {} as it is, nothing fitted\n",
            log.len(),
            log_path.display(),
            log.format,
            scenario_path.display()
        );
        if let Some(excluded) = log.excluded_summary() {
            out.push_str(&format!("left out of the log: {excluded}\n"));
        }
        if self.not_completed > 0 {
            out.push_str(&format!(
                "{} requests did not complete in the simulation; the figures are over those that \
                 did\n",
                self.not_completed
            ));
        }
        out.push_str(&self.table());
        out.push_str(&format!(
            "worst error {:.1}%: a prediction if no parameter of the scenario came from this log, \
             a replay otherwise\n",
            self.worst_error() * 100.0
        ));
        out
    }
}

/// The bootstrap's text: each parameter's 5%..95% over `replicas` replicas.
pub fn describe_intervals(intervals: &[Interval], replicas: usize) -> String {
    let mut out = format!("bootstrap over requests ({replicas} replicas): 5%..95%\n");
    for i in intervals {
        out.push_str(&format!(
            "  {:<30} {:>14.3} .. {:>14.3} {}\n",
            i.key,
            i.p5,
            i.p95,
            parameter_unit(i.key)
        ));
    }
    out
}

/// What makes a fit (`fit`, fitted to `data`) untrustworthy: no convergence in `iterations`,
/// and each parameter given as (its name, its value as written, its key, its search's bounds)
/// that ended on a bound.
pub fn untrusted<'k>(
    fit: &str,
    data: &str,
    converged: bool,
    iterations: u64,
    on_bound: impl Iterator<Item = (String, String, &'k str, (f64, f64))>,
) -> Vec<String> {
    let mut out = Vec::new();
    if !converged {
        out.push(format!(
            "{fit} did not converge in {iterations} iterations; raise --max-iterations"
        ));
    }
    for (name, value, key, bounds) in on_bound {
        out.push(format!(
            "{name} = {value} {} lies on a bound of its search ({:e}..{:e}): {data} cannot place it",
            parameter_unit(key),
            bounds.0,
            bounds.1
        ));
    }
    out
}
