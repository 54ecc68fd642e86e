//! Throughput-latency curves: achieved throughput on x, p50/p95/p99 latency on y.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::{
    DrawResult, FONT, LegendEntry, LegendMark, PlotError, PlotSize, TextSizes, bad_data, canvas,
    compact, draw_legend, extent, log_padded, padded, series_colour, wants_log,
};

/// One load point of a configuration's curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    /// Achieved throughput, requests per second.
    pub throughput_rps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 95th-percentile latency, milliseconds.
    pub p95_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// One configuration's curve and its knees.
#[derive(Debug, Clone, PartialEq)]
pub struct CurveSeries {
    /// The configuration, as the legend shows it.
    pub label: String,
    /// Points in increasing offered load.
    pub points: Vec<CurvePoint>,
    /// Where the curve crosses the SLO: (throughput rps, latency ms).
    pub slo_knee: Option<(f64, f64)>,
    /// The Kneedle knee: (throughput rps, latency ms).
    pub kneedle_knee: Option<(f64, f64)>,
}

/// A throughput-latency plot.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputLatencyPlot {
    /// The title.
    pub title: String,
    /// One series per configuration.
    pub series: Vec<CurveSeries>,
    /// The SLO bound drawn as a horizontal line, milliseconds.
    pub slo_ms: Option<f64>,
    /// The SLO as the legend shows it, e.g. `SLO e2e.p99<=800ms`.
    pub slo_label: String,
}

/// Draws `plot` to the PNG at `path`. The y axis is logarithmic when latencies span more than a
/// factor of 30. Each configuration gets a colour; p99 is a thick solid line, p95 dashed, p50
/// thin. The SLO knee is a hollow square, the Kneedle knee a cross.
pub fn draw_throughput_latency(
    plot: &ThroughputLatencyPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    let points = || plot.series.iter().flat_map(|s| s.points.iter());
    if points().next().is_none() {
        return Err(bad_data(path, "no curve points to draw"));
    }
    let valid = |v: f64| v.is_finite() && v >= 0.0;
    if let Some(bad) = points().find(|p| {
        !(valid(p.throughput_rps) && valid(p.p50_ms) && valid(p.p95_ms) && valid(p.p99_ms))
    }) {
        return Err(bad_data(
            path,
            format!("a point is negative or not finite: {bad:?}"),
        ));
    }
    let (x_lo, x_hi) = extent(points().map(|p| p.throughput_rps)).unwrap_or((0.0, 1.0));
    let latencies = points()
        .flat_map(|p| [p.p50_ms, p.p95_ms, p.p99_ms])
        .chain(plot.slo_ms);
    let (y_lo, y_hi) = extent(latencies).unwrap_or((0.0, 1.0));
    let x_range = 0.0..padded(x_lo, x_hi).1;

    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let legend = legend_entries(plot);
    let legend_px = super::legend_width_px(
        legend.iter().map(|e| e.label.chars().count()),
        sizes.tick,
        size.width_px,
    );
    let (chart_area, legend_area) = root.split_horizontally(size.width_px - legend_px);
    if wants_log(y_lo, y_hi) {
        let (lo, hi) = log_padded(y_lo, y_hi);
        draw_chart(
            &chart_area,
            plot,
            x_range,
            (lo..hi).log_scale(),
            sizes,
            path,
        )?;
    } else {
        let (_, hi) = padded(y_lo, y_hi);
        draw_chart(&chart_area, plot, x_range, 0.0..hi, sizes, path)?;
    }
    draw_legend(&legend_area, &legend, sizes.tick, path)?;
    root.present().at(path)
}

fn draw_chart<Y>(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    plot: &ThroughputLatencyPlot,
    x_range: std::ops::Range<f64>,
    y_range: Y,
    sizes: TextSizes,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(sizes.label * 3)
        .y_label_area_size(sizes.label * 4)
        .build_cartesian_2d(x_range, y_range)
        .at(path)?;
    chart
        .configure_mesh()
        .x_desc("achieved throughput (req/s)")
        .y_desc("latency (ms)")
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| compact(*v))
        .y_label_formatter(&|v| compact(*v))
        .y_labels(12)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .at(path)?;

    if let Some(slo_ms) = plot.slo_ms {
        let (x0, x1) = (chart.x_range().start, chart.x_range().end);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x0, slo_ms), (x1, slo_ms)],
                RED.stroke_width(2),
            )))
            .at(path)?;
    }
    for (index, series) in plot.series.iter().enumerate() {
        let colour = series_colour(index);
        let line = |pick: fn(&CurvePoint) -> f64| {
            series
                .points
                .iter()
                .map(move |p| (p.throughput_rps, pick(p)))
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(LineSeries::new(line(|p| p.p99_ms), colour.stroke_width(3)))
            .at(path)?;
        chart
            .draw_series(DashedLineSeries::new(
                line(|p| p.p95_ms),
                10,
                6,
                colour.stroke_width(2),
            ))
            .at(path)?;
        chart
            .draw_series(LineSeries::new(line(|p| p.p50_ms), colour.stroke_width(1)))
            .at(path)?;
        chart
            .draw_series(
                line(|p| p.p99_ms)
                    .into_iter()
                    .map(|point| Circle::new(point, 3, colour.filled())),
            )
            .at(path)?;
        if let Some(knee) = series.slo_knee {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(knee)
                        + Rectangle::new([(-8, -8), (8, 8)], BLACK.stroke_width(3))
                        + Rectangle::new([(-6, -6), (6, 6)], colour.stroke_width(2)),
                ))
                .at(path)?;
        }
        if let Some(knee) = series.kneedle_knee {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(knee)
                        + Cross::new((0, 0), 9, BLACK.stroke_width(4))
                        + Cross::new((0, 0), 7, colour.stroke_width(2)),
                ))
                .at(path)?;
        }
    }
    Ok(())
}

fn legend_entries(plot: &ThroughputLatencyPlot) -> Vec<LegendEntry> {
    let mut entries: Vec<LegendEntry> = plot
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| LegendEntry {
            label: s.label.clone(),
            colour: series_colour(i),
            mark: LegendMark::Box,
        })
        .collect();
    let grey = RGBColor(90, 90, 90);
    for (label, mark) in [
        ("p99", LegendMark::Line(3)),
        ("p95", LegendMark::Dashed(2)),
        ("p50", LegendMark::Line(1)),
        ("SLO knee", LegendMark::Square),
        ("Kneedle knee", LegendMark::Cross),
    ] {
        entries.push(LegendEntry {
            label: label.to_string(),
            colour: grey,
            mark,
        });
    }
    if plot.slo_ms.is_some() {
        entries.push(LegendEntry {
            label: plot.slo_label.clone(),
            colour: RED,
            mark: LegendMark::Line(2),
        });
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::png_size;

    pub(crate) fn sample_plot(wide: bool) -> ThroughputLatencyPlot {
        let series = (0..3)
            .map(|c| {
                let capacity = 400.0 * f64::from(c + 1);
                let points: Vec<CurvePoint> = (1..=12)
                    .map(|i| {
                        let rho = f64::from(i) / 12.5;
                        let base = 20.0 + 5.0 * f64::from(c);
                        let wait = if wide {
                            40.0 * rho / (1.0 - rho)
                        } else {
                            5.0 * rho
                        };
                        CurvePoint {
                            throughput_rps: capacity * rho,
                            p50_ms: base + wait * 0.7,
                            p95_ms: base + wait * 2.0,
                            p99_ms: base + wait * 3.0,
                        }
                    })
                    .collect();
                CurveSeries {
                    label: format!("batcher.max_batch_size={} instances=2", 1 << (2 * c)),
                    slo_knee: Some((points[9].throughput_rps, points[9].p99_ms)),
                    kneedle_knee: Some((points[8].throughput_rps, points[8].p99_ms)),
                    points,
                }
            })
            .collect();
        ThroughputLatencyPlot {
            title: "Throughput vs latency".into(),
            series,
            slo_ms: Some(if wide { 800.0 } else { 40.0 }),
            slo_label: "SLO e2e.p99<=800ms".into(),
        }
    }

    #[test]
    fn throughput_latency_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        for (wide, size) in [
            (true, PlotSize::DEFAULT),
            (
                false,
                PlotSize {
                    width_px: 640,
                    height_px: 420,
                },
            ),
        ] {
            let path = dir.path().join(format!("curves_{wide}.png"));
            draw_throughput_latency(&sample_plot(wide), size, &path).unwrap();
            assert_eq!(png_size(&path), (size.width_px, size.height_px));
        }
    }

    #[test]
    fn empty_or_non_finite_curves_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let mut plot = sample_plot(true);
        plot.series.clear();
        assert!(matches!(
            draw_throughput_latency(&plot, PlotSize::DEFAULT, &path),
            Err(PlotError::BadData { .. })
        ));
        let mut plot = sample_plot(true);
        plot.series[1].points[3].p99_ms = f64::NAN;
        assert!(draw_throughput_latency(&plot, PlotSize::DEFAULT, &path).is_err());
        let plot = sample_plot(true);
        let not_png = dir.path().join("curves.jpg");
        assert!(draw_throughput_latency(&plot, PlotSize::DEFAULT, &not_png).is_err());
    }
}
