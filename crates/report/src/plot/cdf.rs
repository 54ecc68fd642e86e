//! Latency CDFs per configuration at one load.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::Png;

use super::{
    DrawResult, FONT, LegendEntry, LegendMark, PlotError, PlotSize, TextSizes, bad_data, canvas,
    compact, draw_legend, extent, legend_width_px, log_padded, padded, series_colour,
    series_legend, wants_log,
};

/// Most points drawn per CDF line; larger samples are thinned evenly by rank.
const MAX_CDF_POINTS: usize = 2_000;

/// One configuration's latency sample.
#[derive(Debug, Clone, PartialEq)]
pub struct CdfSeries {
    /// The configuration, as the legend shows it.
    pub label: String,
    /// Latencies in milliseconds, any order.
    pub latencies_ms: Vec<f64>,
}

/// A latency CDF plot.
#[derive(Debug, Clone, PartialEq)]
pub struct CdfPlot {
    /// The title, which should name the load the samples come from.
    pub title: String,
    /// One series per configuration; empty series are skipped.
    pub series: Vec<CdfSeries>,
    /// The SLO bound drawn as a vertical line, milliseconds.
    pub slo_ms: Option<f64>,
}

/// Draws the empirical CDF of each series (fraction of requests at or below a latency) to the
/// PNG at `path`; the latency axis is logarithmic when the values span more than a factor of 30.
pub fn draw_latency_cdf(plot: &CdfPlot, size: PlotSize, path: &Path) -> Result<(), PlotError> {
    let all = || {
        plot.series
            .iter()
            .flat_map(|s| s.latencies_ms.iter().copied())
    };
    if all().next().is_none() {
        return Err(bad_data(path, "no latencies to draw"));
    }
    if let Some(bad) = all().find(|v| !(v.is_finite() && *v >= 0.0)) {
        return Err(bad_data(
            path,
            format!("latency {bad} is negative or not finite"),
        ));
    }
    let curves: Vec<Vec<(f64, f64)>> = plot
        .series
        .iter()
        .map(|s| cdf_points(&s.latencies_ms))
        .collect();
    let (x_lo, x_hi) = extent(all().chain(plot.slo_ms)).unwrap_or((0.0, 1.0));

    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let mut legend = series_legend(plot.series.iter().map(|s| s.label.as_str()));
    if let Some(slo_ms) = plot.slo_ms {
        legend.push(LegendEntry {
            label: format!("SLO {} ms", compact(slo_ms)),
            colour: RED,
            mark: LegendMark::Line(2),
        });
    }
    let legend_px = legend_width_px(
        legend.iter().map(|e| e.label.chars().count()),
        sizes.tick,
        size.width_px,
    );
    let (chart_area, legend_area) = root.split_horizontally(size.width_px - legend_px);
    let x_positive = x_lo > 0.0;
    if x_positive && wants_log(x_lo, x_hi) {
        let (lo, hi) = log_padded(x_lo, x_hi);
        draw_chart(
            &chart_area,
            plot,
            &curves,
            (lo..hi).log_scale(),
            sizes,
            path,
            true,
        )?;
    } else {
        let (_, hi) = padded(x_lo, x_hi);
        draw_chart(&chart_area, plot, &curves, 0.0..hi, sizes, path, false)?;
    }
    draw_legend(&legend_area, &legend, sizes.tick, path)?;
    root.present().at(path)
}

/// Whether `value` is 1, 2 or 5 times a power of ten: the only ticks labelled on a log axis
/// (a label at every 10, 20, ..., 90, 100 crowds the decade's top end).
fn nice_log_tick(value: f64) -> bool {
    if !(value > 0.0 && value.is_finite()) {
        return true;
    }
    let mantissa = value / 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|k| (mantissa - k).abs() < 1e-6 * k)
}

/// The empirical CDF as (latency, fraction ≤ latency) steps, thinned to [`MAX_CDF_POINTS`].
fn cdf_points(latencies_ms: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted = latencies_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let count = sorted.len();
    let stride = count.div_ceil(MAX_CDF_POINTS).max(1);
    let mut points: Vec<(f64, f64)> = (0..count)
        .step_by(stride)
        .map(|i| (sorted[i], (i + 1) as f64 / count as f64))
        .collect();
    if let Some(&last) = sorted.last()
        && points.last().is_some_and(|p| p.1 < 1.0)
    {
        points.push((last, 1.0));
    }
    points
}

fn draw_chart<X>(
    area: &DrawingArea<Png<'_>, Shift>,
    plot: &CdfPlot,
    curves: &[Vec<(f64, f64)>],
    x_range: X,
    sizes: TextSizes,
    path: &Path,
    log: bool,
) -> Result<(), PlotError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(sizes.label * 3)
        .y_label_area_size(sizes.label * 4)
        .build_cartesian_2d(x_range, 0.0..1.02)
        .at(path)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("fraction of requests at or below")
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| {
            if !log || nice_log_tick(*v) {
                compact(*v)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v| format!("{v:.1}"))
        .x_labels(12)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .at(path)?;
    if let Some(slo_ms) = plot.slo_ms {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(slo_ms, 0.0), (slo_ms, 1.02)],
                RED.stroke_width(2),
            )))
            .at(path)?;
    }
    for (index, curve) in curves.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                curve.iter().copied(),
                series_colour(index).stroke_width(3),
            ))
            .at(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::png_size;

    #[test]
    fn log_ticks_are_labelled_at_1_2_5_only() {
        let labelled: Vec<f64> = [10.0, 20.0, 30.0, 50.0, 90.0, 100.0, 200.0, 300.0, 0.5]
            .into_iter()
            .filter(|v| nice_log_tick(*v))
            .collect();
        assert_eq!(labelled, vec![10.0, 20.0, 50.0, 100.0, 200.0, 0.5]);
    }

    #[test]
    fn cdf_points_end_at_one_and_increase() {
        let sample: Vec<f64> = (0..10_001).map(|i| f64::from(i % 977)).collect();
        let points = cdf_points(&sample);
        assert!(points.len() <= MAX_CDF_POINTS + 1);
        assert_eq!(points.last().unwrap().1, 1.0);
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1)
        );
    }

    #[test]
    fn latency_cdf_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let series = (0..3)
            .map(|c| CdfSeries {
                label: format!("instances={}", c + 1),
                // A deterministic exponential-like sample by inverse transform on a grid.
                latencies_ms: (1..2000)
                    .map(|i| 5.0 - 20.0 * f64::from(c + 1) * (1.0 - f64::from(i) / 2000.0).ln())
                    .collect(),
            })
            .collect();
        let plot = CdfPlot {
            title: "Latency CDF at 2x load".into(),
            series,
            slo_ms: Some(120.0),
        };
        let path = dir.path().join("cdf.png");
        draw_latency_cdf(&plot, PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
    }

    #[test]
    fn a_slower_sample_is_drawn_further_right_and_the_slo_where_it_maps() {
        use crate::plot::test_support::Image;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cdf_shift.png");
        let uniform = |lo: f64| (0..1000).map(|i| lo + lo * f64::from(i) / 1000.0).collect();
        let plot = CdfPlot {
            title: "t".into(),
            series: vec![
                CdfSeries {
                    label: "fast".into(),
                    latencies_ms: uniform(10.0),
                },
                CdfSeries {
                    label: "slow".into(),
                    latencies_ms: uniform(40.0),
                },
            ],
            slo_ms: Some(60.0),
        };
        draw_latency_cdf(&plot, PlotSize::DEFAULT, &path).unwrap();
        let image = Image::read(&path);
        let mid_x = |colour| {
            // Left of the legend (at least 18% of the width, on the right).
            let columns: Vec<i32> = image
                .columns_of_colour(colour)
                .into_iter()
                .filter(|&x| x < image.width as i32 * 8 / 10)
                .collect();
            assert!(!columns.is_empty(), "a series is not drawn");
            (columns[0], columns[columns.len() - 1])
        };
        let (fast, slow) = (mid_x(series_colour(0)), mid_x(series_colour(1)));
        assert!(
            fast.1 < slow.0,
            "fast {fast:?} must end left of where slow {slow:?} starts"
        );
        // Linear axis from 0: the slow sample spans 40..80 ms, the SLO at 60 ms sits midway.
        let slo: Vec<i32> = image
            .columns_of_colour(RED)
            .into_iter()
            .filter(|&x| x < image.width as i32 * 8 / 10)
            .collect();
        let slo_x = slo.iter().sum::<i32>() / slo.len() as i32;
        let expected = (slow.0 + slow.1) / 2;
        assert!(
            (slo_x - expected).abs() <= 6,
            "SLO at column {slo_x}, expected ~{expected}"
        );
    }
}
