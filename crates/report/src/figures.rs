//! The sweep's two latency-against-load figures, built from a [`SweepResult`]:
//! `throughput_latency.png` (small multiples, one panel per configuration of the top of the
//! ranking) and `p99_by_config.png` (every configuration's p99 in one panel, each line ending at
//! its capacity).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::capacity::Bracket;
use crate::plot::{
    CapacityMark, ConfigLine, LatencyByConfigPlot, LoadLatencyPlot, LoadPanel, LoadPoint,
    PlotError, PlotSize, draw_latency_by_config, draw_load_latency,
};
use crate::slo::{LatencyStat, Metric, Slo};
use crate::sweep::{CapacityRow, CurveRow, SweepResult, stage_stat};

/// Panels in the small-multiples figure: the best configurations by the sweep's ranking
/// (capacity per instance).
pub const SMALL_MULTIPLES: usize = 6;

/// Most lines in the all-configurations figure (the best by the ranking).
pub const MAX_LINES: usize = 12;

/// Curve points closer below a capacity than this fraction are not drawn before it.
const NEAR_CAPACITY: f64 = 0.05;

/// Draws both figures into `dir`; returns the files written (none when no configuration has a
/// curve, e.g. a `capsim plan` sweep).
pub fn draw_load_figures(
    dir: &Path,
    result: &SweepResult,
    slo: &Slo,
    ranking: &[&CapacityRow],
    label: &dyn Fn(usize) -> String,
    size: PlotSize,
) -> Result<Vec<PathBuf>, PlotError> {
    let primary = slo.primary();
    let mut curves: BTreeMap<usize, Vec<&CurveRow>> = BTreeMap::new();
    for row in &result.curves {
        curves.entry(row.config_index).or_default().push(row);
    }
    let with_curves: Vec<&CapacityRow> = ranking
        .iter()
        .copied()
        .filter(|row| curves.contains_key(&row.config_index))
        .collect();
    let mut written = Vec::new();
    let slo_ms = primary.bound_ns as f64 / 1e6;
    let slo_label = format!("SLO {primary}");

    let also = if slo.objectives().len() > 1 {
        " (capacity holds every SLO term)"
    } else {
        ""
    };
    let panels: Vec<LoadPanel> = with_curves
        .iter()
        .take(SMALL_MULTIPLES)
        .map(|row| LoadPanel {
            label: label(row.config_index),
            points: load_points(&curves[&row.config_index], primary.metric),
            capacity: capacity_mark(row, primary.stat),
        })
        .filter(|p| !p.points.is_empty())
        .collect();
    if !panels.is_empty() {
        let left_out = ranking.len() - panels.len();
        let note = if left_out > 0 {
            format!(
                "The best {} of {} configurations by capacity per instance; {left_out} left out here (all are in p99_by_config.png and the table).",
                panels.len(),
                ranking.len()
            )
        } else {
            String::new()
        };
        let plot = LoadLatencyPlot {
            title: format!("{} latency vs offered load{also}", primary.metric),
            metric: primary.metric.to_string(),
            panels,
            slo_ms: Some(slo_ms),
            slo_label: slo_label.clone(),
            note,
        };
        let path = dir.join("throughput_latency.png");
        draw_load_latency(&plot, size, &path)?;
        written.push(path);
    }

    let lines: Vec<ConfigLine> = with_curves
        .iter()
        .take(MAX_LINES)
        .map(|row| {
            let points = load_points(&curves[&row.config_index], primary.metric);
            config_line(label(row.config_index), &points, row, primary.stat)
        })
        .filter(|l| !l.points.is_empty())
        .collect();
    if !lines.is_empty() {
        let more = if with_curves.len() > lines.len() {
            format!(" (best {} of {})", lines.len(), with_curves.len())
        } else {
            String::new()
        };
        let plot = LatencyByConfigPlot {
            title: format!(
                "{} p99 by configuration, each line ending at its capacity{more}{also}",
                primary.metric
            ),
            y_name: format!("{} p99 latency", primary.metric),
            lines,
            slo_ms: (primary.stat == LatencyStat::Percentile(99.0)).then_some(slo_ms),
            slo_label,
        };
        let path = dir.join("p99_by_config.png");
        draw_latency_by_config(&plot, size, &path)?;
        written.push(path);
    }
    Ok(written)
}

/// Per load, means over seeds of offered and achieved rate and of p50/p95/p99 of `metric`; loads
/// where some seed has no value for the metric are left out.
pub fn load_points(rows: &[&CurveRow], metric: Metric) -> Vec<LoadPoint> {
    let mut by_load: BTreeMap<u64, Vec<&CurveRow>> = BTreeMap::new();
    for row in rows {
        by_load.entry(row.load.to_bits()).or_default().push(row);
    }
    let mut points: Vec<(f64, LoadPoint)> = by_load
        .values()
        .filter_map(|runs| {
            let n = runs.len() as f64;
            let mean = |stat: LatencyStat| {
                let values: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| stage_stat(r, metric, stat))
                    .collect();
                (values.len() == runs.len()).then(|| values.iter().sum::<f64>() / n)
            };
            Some((
                runs[0].load,
                LoadPoint {
                    offered_rps: runs.iter().map(|r| r.offered_rps).sum::<f64>() / n,
                    achieved_rps: runs.iter().map(|r| r.throughput_rps).sum::<f64>() / n,
                    p50_ms: mean(LatencyStat::Percentile(50.0))?,
                    p95_ms: mean(LatencyStat::Percentile(95.0))?,
                    p99_ms: mean(LatencyStat::Percentile(99.0))?,
                },
            ))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points.into_iter().map(|(_, p)| p).collect()
}

/// The capacity as the panel marks it (mean, 95% interval, seeds, whether only a lower bound,
/// what ends the curve) with the search's own latency at capacity when the SLO's statistic
/// `stat` is one of the percentiles the panel draws.
pub fn capacity_mark(row: &CapacityRow, stat: LatencyStat) -> Option<CapacityMark> {
    let estimate = row.capacity_rps?;
    let drawn = [50.0, 95.0, 99.0]
        .map(LatencyStat::Percentile)
        .contains(&stat);
    Some(CapacityMark {
        rps: estimate.mean,
        low_rps: estimate.low,
        high_rps: estimate.high,
        seeds: estimate.samples,
        lower_bound: row.bracket_by_seed.contains(&Bracket::AboveRange),
        limited_by: row.limited_by(),
        latency_ms: row.latency_at_capacity_ms.filter(|_| drawn),
    })
}

/// The p99 line of one configuration, ending at its capacity: the curve's points more than 5%
/// below the capacity, then the capacity with the latency the search measured there (when the SLO is on
/// p99) or the curve interpolated at it. A capacity beyond the curve's last load ends the line
/// at that measured point too; without a measured value there, at the last point. No capacity
/// (no load met the SLO) keeps the whole curve, dashed.
pub fn config_line(
    label: String,
    points: &[LoadPoint],
    row: &CapacityRow,
    stat: LatencyStat,
) -> ConfigLine {
    let curve: Vec<(f64, f64)> = points.iter().map(|p| (p.offered_rps, p.p99_ms)).collect();
    let capacity = row.capacity_rps.map(|c| c.mean).filter(|c| *c > 0.0);
    let Some(capacity) = capacity else {
        return ConfigLine {
            label,
            points: curve,
            capacity_rps: None,
        };
    };
    // Curve points within 5% below the capacity are left out: the capacity point is measured at
    // each seed's own capacity, and a curve point just below it (a mean over other runs) can
    // sit above it and draw a hook.
    let mut line: Vec<(f64, f64)> = curve
        .iter()
        .copied()
        .filter(|p| p.0 < capacity * (1.0 - NEAR_CAPACITY))
        .collect();
    let measured = row
        .latency_at_capacity_ms
        .filter(|_| stat == LatencyStat::Percentile(99.0));
    let end = measured.or_else(|| interpolate(&curve, capacity));
    if let Some(latency) = end {
        line.push((capacity, latency));
    }
    ConfigLine {
        label,
        points: line,
        capacity_rps: Some(capacity),
    }
}

/// The curve's latency at `x` by linear interpolation; `None` outside the curve.
fn interpolate(curve: &[(f64, f64)], x: f64) -> Option<f64> {
    curve.windows(2).find_map(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        (x0 <= x && x <= x1 && x1 > x0).then(|| y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interval::Estimate;

    fn row(capacity: Option<f64>, latency: Option<f64>) -> CapacityRow {
        CapacityRow {
            config_index: 0,
            configuration: "instances=1".into(),
            settings: vec![("instances".into(), "1".into())],
            instances: 1,
            capacity_rps_by_seed: vec![capacity.unwrap_or(0.0)],
            bracket_by_seed: vec![Bracket::Found],
            limited_by_by_seed: vec![vec![crate::capacity::Limit::Slo]],
            capacity_rps: capacity.map(|c| Estimate {
                mean: c,
                low: c,
                high: c,
                samples: 1,
            }),
            capacity_per_instance_rps: capacity,
            latency_at_capacity_ms: latency,
            slo_knee: None,
            kneedle_knee: None,
            knee_warnings: Vec::new(),
            cost_per_million_requests: None,
        }
    }

    fn points() -> Vec<LoadPoint> {
        [(10.0, 20.0), (20.0, 40.0), (40.0, 200.0)]
            .into_iter()
            .map(|(x, y)| LoadPoint {
                offered_rps: x,
                achieved_rps: x,
                p50_ms: y / 4.0,
                p95_ms: y / 2.0,
                p99_ms: y,
            })
            .collect()
    }

    #[test]
    fn line_ends_at_capacity_with_the_measured_latency() {
        let line = config_line(
            "a".into(),
            &points(),
            &row(Some(30.0), Some(99.0)),
            LatencyStat::Percentile(99.0),
        );
        assert_eq!(line.points, vec![(10.0, 20.0), (20.0, 40.0), (30.0, 99.0)]);
        assert_eq!(line.capacity_rps, Some(30.0));
    }

    #[test]
    fn line_interpolates_when_the_slo_is_not_on_p99() {
        let line = config_line(
            "a".into(),
            &points(),
            &row(Some(30.0), Some(55.0)),
            LatencyStat::Percentile(95.0),
        );
        assert_eq!(line.points.last(), Some(&(30.0, 120.0)));
    }

    #[test]
    fn no_capacity_keeps_the_whole_curve() {
        let line = config_line(
            "a".into(),
            &points(),
            &row(Some(0.0), None),
            LatencyStat::Percentile(99.0),
        );
        assert_eq!(line.points.len(), 3);
        assert_eq!(line.capacity_rps, None);
    }

    #[test]
    fn a_curve_point_just_below_capacity_is_not_drawn_before_it() {
        let line = config_line(
            "a".into(),
            &points(),
            &row(Some(20.5), Some(35.0)),
            LatencyStat::Percentile(99.0),
        );
        assert_eq!(line.points, vec![(10.0, 20.0), (20.5, 35.0)]);
    }
}
