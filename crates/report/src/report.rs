//! `report.md` and its PNGs, drawn from a [`SweepResult`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::load::LoadKind;
use crate::plot::{
    CapacityHeatmap, CdfPlot, CdfSeries, PlotSize, StageBars, StageBreakdownPlot, TimeSeriesPanel,
    TimeSeriesPlot, draw_capacity_heatmap, draw_latency_cdf, draw_stage_breakdown,
    draw_time_series,
};
use crate::slo::{LatencyStat, Metric, Slo};
use crate::sweep::{CapacityRow, CurveRow, SweepResult, stage_stat};

/// Most configurations drawn in one curve or bar plot (the best by capacity per instance).
pub const MAX_PLOTTED_CONFIGURATIONS: usize = 8;

pub use crate::error::ReportError;
pub use crate::sweep::ranked;

/// Draws every plot into `dir` and writes `dir/report.md`; returns the files written.
pub fn write_report(
    dir: &Path,
    result: &SweepResult,
    size: PlotSize,
) -> Result<Vec<PathBuf>, ReportError> {
    let slo: Slo = result.slo.parse()?;
    let ranking = ranked(result);
    if ranking.is_empty() {
        return Err(ReportError::Empty);
    }
    let label = short_labels(result);
    let figures = Figures::new(dir, result, &ranking, size);
    let mut written = Vec::new();

    // 1. Latency against offered load: small multiples of the best, and p99 of all.
    written.extend(crate::figures::draw_load_figures(
        dir, result, &slo, &ranking, &label, size,
    )?);
    // 2. Latency CDF at the detail load.
    written.extend(figures.latency_cdf(&slo)?);
    // 3. Stage breakdown.
    written.extend(figures.stage_breakdown()?);
    // 4. Time series of the best configuration's detail run.
    written.extend(figures.time_series()?);

    // 5. Capacity heatmap over the first two grid axes (best value over the other axes).
    if let Some(heatmap) = heatmap(result, &slo) {
        let path = dir.join("capacity_heatmap.png");
        draw_capacity_heatmap(&heatmap, size, &path)?;
        written.push(path);
    }

    let documents = crate::review::write_documents(dir, result, &slo, &ranking, &written)?;
    written.extend(documents);
    Ok(written)
}

/// What the CDF, stage and time-series figures share: where they go, the configurations they
/// show (the best [`MAX_PLOTTED_CONFIGURATIONS`]) and the detail run of each.
struct Figures<'a> {
    dir: &'a Path,
    result: &'a SweepResult,
    size: PlotSize,
    shown: Vec<&'a CapacityRow>,
    /// Appended to a title when `shown` is a subset of the ranking.
    subset_note: String,
    details: BTreeMap<usize, &'a crate::sweep::ConfigDetail>,
}

impl<'a> Figures<'a> {
    fn new(
        dir: &'a Path,
        result: &'a SweepResult,
        ranking: &[&'a CapacityRow],
        size: PlotSize,
    ) -> Self {
        let shown: Vec<&CapacityRow> = ranking
            .iter()
            .take(MAX_PLOTTED_CONFIGURATIONS)
            .copied()
            .collect();
        let subset_note = if ranking.len() > shown.len() {
            format!(
                " (best {} of {} by capacity per instance)",
                shown.len(),
                ranking.len()
            )
        } else {
            String::new()
        };
        let details = result.details.iter().map(|d| (d.config_index, d)).collect();
        Figures {
            dir,
            result,
            size,
            shown,
            subset_note,
            details,
        }
    }

    /// The runs of configuration `index` on the curves.
    fn rows_of(&self, index: usize) -> Vec<&'a CurveRow> {
        self.result
            .curves
            .iter()
            .filter(|r| r.config_index == index)
            .collect()
    }

    /// `latency_cdf.png`: the end-to-end latency CDF at the detail load; `None` without
    /// quantiles to draw.
    fn latency_cdf(&self, slo: &Slo) -> Result<Option<PathBuf>, ReportError> {
        let label = short_labels(self.result);
        let cdf_series: Vec<CdfSeries> = self
            .shown
            .iter()
            .filter_map(|row| self.details.get(&row.config_index).map(|d| (row, d)))
            .filter(|(_, d)| !d.e2e_quantiles_ms.is_empty())
            .map(|(row, d)| CdfSeries {
                label: label(row.config_index),
                latencies_ms: d.e2e_quantiles_ms.clone(),
            })
            .collect();
        if cdf_series.is_empty() {
            return Ok(None);
        }
        let detail_load = self.result.details.first().map(|d| d.load);
        let primary = slo.primary();
        let path = self.dir.join("latency_cdf.png");
        let plot = CdfPlot {
            title: format!(
                "End-to-end latency CDF at {}{}",
                detail_load.map_or(String::new(), |load| load_title(self.result, load)),
                self.subset_note
            ),
            series: cdf_series,
            slo_ms: primary
                .metric
                .is_end_to_end()
                .then(|| primary.bound_ns as f64 / 1e6),
        };
        draw_latency_cdf(&plot, self.size, &path)?;
        Ok(Some(path))
    }

    /// The load the stage breakdown is drawn at: the highest curve load where every shown
    /// configuration meets the SLO (else the lowest load), so that no overloaded configuration
    /// dwarfs the others; `None` without curves.
    fn breakdown_load(&self) -> Option<f64> {
        let mut loads: Vec<f64> = self.result.curves.iter().map(|r| r.load).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        let all_meet = |load: f64| {
            self.shown.iter().all(|row| {
                let runs: Vec<&CurveRow> = self
                    .rows_of(row.config_index)
                    .into_iter()
                    .filter(|r| r.load == load)
                    .collect();
                !runs.is_empty() && runs.iter().all(|r| r.slo_met)
            })
        };
        loads
            .iter()
            .rev()
            .copied()
            .find(|&l| all_meet(l))
            .or(loads.first().copied())
    }

    /// `stage_breakdown.png`: the time per stage of each shown configuration at
    /// [`Self::breakdown_load`]; `None` without a load, bars or stages to draw.
    fn stage_breakdown(&self) -> Result<Option<PathBuf>, ReportError> {
        let Some(load) = self.breakdown_load() else {
            return Ok(None);
        };
        let stages: Vec<Metric> = Metric::STAGES
            .into_iter()
            .filter(|s| !s.is_end_to_end())
            .filter(|s| {
                self.result
                    .curves
                    .iter()
                    .any(|r| r.latency_ms.contains_key(s.summary_key()))
            })
            .collect();
        let bars: Vec<StageBars> = self
            .shown
            .iter()
            .filter_map(|row| self.stage_bars(row, load, &stages))
            .collect();
        if bars.is_empty() || stages.is_empty() {
            return Ok(None);
        }
        let path = self.dir.join("stage_breakdown.png");
        let plot = StageBreakdownPlot {
            title: format!(
                "Time per stage at {}{}",
                load_title(self.result, load),
                self.subset_note
            ),
            stages: stages.iter().map(|s| s.to_string()).collect(),
            bars,
        };
        draw_stage_breakdown(&plot, self.size, &path)?;
        Ok(Some(path))
    }

    /// The mean and p99 of each of `stages` for `row`'s runs at `load`, averaged over its seeds
    /// (0 for a stage no run reports); `None` without a run at `load`.
    fn stage_bars(&self, row: &CapacityRow, load: f64, stages: &[Metric]) -> Option<StageBars> {
        let at_load: Vec<&CurveRow> = self
            .rows_of(row.config_index)
            .into_iter()
            .filter(|r| r.load == load)
            .collect();
        if at_load.is_empty() {
            return None;
        }
        let mean_of = |stage: Metric, stat: LatencyStat| {
            let values: Vec<f64> = at_load
                .iter()
                .filter_map(|r| stage_stat(r, stage, stat))
                .collect();
            if values.is_empty() {
                0.0
            } else {
                values.iter().sum::<f64>() / values.len() as f64
            }
        };
        Some(StageBars {
            label: short_labels(self.result)(row.config_index),
            mean_ms: stages
                .iter()
                .map(|&s| mean_of(s, LatencyStat::Mean))
                .collect(),
            p99_ms: stages
                .iter()
                .map(|&s| mean_of(s, LatencyStat::Percentile(99.0)))
                .collect(),
        })
    }

    /// `timeseries.png`: queue depth, batch size and utilization over the best configuration's
    /// detail run; `None` without one.
    fn time_series(&self) -> Result<Option<PathBuf>, ReportError> {
        let Some(detail) = self.details.get(&self.shown[0].config_index) else {
            return Ok(None);
        };
        if detail.time_s.is_empty() {
            return Ok(None);
        }
        let path = self.dir.join("timeseries.png");
        let panel = |name: &str, values: &[f64]| TimeSeriesPanel {
            name: name.to_string(),
            points: detail
                .time_s
                .iter()
                .copied()
                .zip(values.iter().copied())
                .collect(),
        };
        let plot = TimeSeriesPlot {
            title: format!(
                "{} at {}",
                short_labels(self.result)(detail.config_index),
                load_title(self.result, detail.load)
            ),
            panels: vec![
                panel("queue depth (requests waiting)", &detail.queued),
                panel("mean batch size (requests)", &detail.batch_size_mean),
                panel(
                    "utilization (fraction of model instances busy)",
                    &detail.utilization,
                ),
            ],
        };
        draw_time_series(&plot, self.size, &path)?;
        Ok(Some(path))
    }
}

/// Labels that show only the grid keys that vary, by their last dotted part.
pub(crate) fn short_labels(result: &SweepResult) -> impl Fn(usize) -> String + '_ {
    move |index| {
        let Some(row) = result.capacities.iter().find(|c| c.config_index == index) else {
            return format!("config {index}");
        };
        if row.settings.is_empty() {
            return "baseline".to_string();
        }
        row.settings
            .iter()
            .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn heatmap(result: &SweepResult, slo: &Slo) -> Option<CapacityHeatmap> {
    let (x_key, x_values) = (result.grid_keys.first()?, result.grid_values.first()?);
    let (y_key, y_values) = match (result.grid_keys.get(1), result.grid_values.get(1)) {
        (Some(k), Some(v)) => (k.clone(), v.clone()),
        _ => ("(no second axis)".to_string(), vec!["all".to_string()]),
    };
    let mut values = vec![None; x_values.len() * y_values.len()];
    for row in &result.capacities {
        let value_of = |key: &str| {
            row.settings
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let column = x_values
            .iter()
            .position(|v| Some(v.as_str()) == value_of(x_key))?;
        let line = if result.grid_keys.len() > 1 {
            y_values
                .iter()
                .position(|v| Some(v.as_str()) == value_of(&y_key))?
        } else {
            0
        };
        if let Some(capacity) = row.capacity_rps.map(|c| c.mean).filter(|c| *c > 0.0) {
            let cell: &mut Option<f64> = &mut values[line * x_values.len() + column];
            *cell = Some(cell.map_or(capacity, |best: f64| best.max(capacity)));
        }
    }
    let others = if result.grid_keys.len() > 2 {
        ", best over the other axes"
    } else {
        ""
    };
    Some(CapacityHeatmap {
        title: format!("Capacity (req/s) under {slo}{others}"),
        x_name: x_key.clone(),
        x_labels: x_values.clone(),
        y_name: y_key,
        y_labels: y_values,
        values_rps: values,
    })
}

/// A load as a figure title states it: the offered rate in req/s (with the multiple of the
/// trace for a rate-scale axis), or the client count of a closed loop.
fn load_title(result: &SweepResult, load: f64) -> String {
    let offered: Vec<f64> = result
        .curves
        .iter()
        .filter(|row| row.load == load)
        .map(|row| row.offered_rps)
        .collect();
    let measured =
        (!offered.is_empty()).then(|| offered.iter().sum::<f64>() / offered.len() as f64);
    let trace_rate_rps = result
        .review
        .as_ref()
        .map(|review| review.question.mean_rate_rps);
    let rate_rps = match result.load_kind {
        LoadKind::RateScale => trace_rate_rps.map(|rate| rate * load).or(measured),
        _ => measured,
    };
    title_of_load(result.load_kind, load, rate_rps)
}

/// [`load_title`] from the load's kind and value and, for a rate-scale axis, its offered rate.
fn title_of_load(kind: LoadKind, load: f64, rate_rps: Option<f64>) -> String {
    match (kind, rate_rps) {
        (LoadKind::Concurrency, _) => format!("{} clients", trim(load)),
        (LoadKind::TargetRate, _) => format!("{load:.0} req/s offered"),
        (LoadKind::RateScale, Some(rate)) => {
            format!("{rate:.0} req/s offered ({}x the trace)", trim(load))
        }
        (LoadKind::RateScale, None) => format!("{}x the trace's rate", trim(load)),
    }
}

fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_titles_state_the_load_as_an_offered_rate_not_a_multiplier_key() {
        let title = title_of_load(LoadKind::RateScale, 2.828, Some(282.8));
        assert_eq!(title, "283 req/s offered (2.828x the trace)");
        assert!(!title.contains("rate_scale"), "{title}");
        assert_eq!(
            title_of_load(LoadKind::TargetRate, 150.0, None),
            "150 req/s offered"
        );
        assert_eq!(
            title_of_load(LoadKind::Concurrency, 16.0, None),
            "16 clients"
        );
    }
}
