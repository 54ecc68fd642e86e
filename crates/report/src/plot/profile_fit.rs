//! A calibration profile's measured latencies against its affine fit.

use std::path::Path;

use capsim_sim::timing::profile::Profile;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::Png;
use super::{
    DrawResult, FONT, LegendEntry, LegendMark, PlotError, PlotSize, TextSizes, bad_data, canvas,
    compact, draw_legend, extent, legend_width_px, padded, series_colour, series_legend,
};

/// One batch size as the calibration measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredPoint {
    /// Requests per batch (the x axis).
    pub batch_size: f64,
    /// Mean latency, milliseconds.
    pub mean_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// One length of the grid: what was measured at each batch size, and what the fit predicts.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSeries {
    /// The length, as the legend shows it (`seq=64`), or the model name without a length axis.
    pub label: String,
    /// The measured points, by increasing batch size.
    pub measured: Vec<MeasuredPoint>,
    /// `(batch size, fitted mean ms)` at the same batch sizes.
    pub fitted: Vec<(f64, f64)>,
}

/// Measured points against the affine fit, one colour per length.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileFitPlot {
    /// The title; should name the model, device and the fit's R².
    pub title: String,
    /// One series per length of the grid.
    pub series: Vec<FitSeries>,
}

impl ProfileFitPlot {
    /// The plot of `profile`: for every length of its grid, the measured mean (circles) and p99
    /// (crosses) of each batch size, and the fitted mean as a dashed line.
    pub fn from_profile(profile: &Profile) -> ProfileFitPlot {
        let ms = |ns: f64| ns / 1e6;
        let p99_index = profile
            .quantile_levels
            .iter()
            .position(|&level| level >= 0.99)
            .unwrap_or(profile.quantile_levels.len().saturating_sub(1));
        let lengths: Vec<Option<u32>> = if profile.grid.lengths.is_empty() {
            vec![None]
        } else {
            profile.grid.lengths.iter().copied().map(Some).collect()
        };
        let dim = profile.grid.length_dim.as_deref().unwrap_or("length");
        let series = lengths
            .into_iter()
            .map(|length| {
                let mut points: Vec<_> = profile
                    .points
                    .iter()
                    .filter(|p| p.length == length)
                    .collect();
                points.sort_by_key(|p| p.batch_size);
                let measured = points
                    .iter()
                    .map(|p| {
                        let p99_ns = p.latency_ns.get(p99_index).copied().unwrap_or(0) as f64;
                        MeasuredPoint {
                            batch_size: f64::from(p.batch_size),
                            mean_ms: ms(p.latency_mean_ns),
                            p99_ms: ms(p99_ns),
                        }
                    })
                    .collect();
                let fitted = points
                    .iter()
                    .map(|p| {
                        let predicted = profile.fit.predict_ns(p.batch_size, length.unwrap_or(0));
                        (f64::from(p.batch_size), ms(predicted))
                    })
                    .collect();
                let label = match length {
                    Some(length) => format!("{dim}={length}"),
                    None => "all inputs".to_string(),
                };
                FitSeries {
                    label,
                    measured,
                    fitted,
                }
            })
            .collect();
        let fit = &profile.fit;
        ProfileFitPlot {
            title: format!(
                "{} on {} ({}): measured vs fit, R² = {:.3}",
                Path::new(&profile.model.path)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| profile.model.path.clone()),
                profile.environment.device_name,
                profile.environment.execution_provider,
                fit.r_squared,
            ),
            series,
        }
    }
}

/// Draws `plot` to the PNG at `path`: batch size on x, latency in milliseconds on y.
pub fn draw_profile_fit(
    plot: &ProfileFitPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    let xs = || {
        plot.series
            .iter()
            .flat_map(|s| s.measured.iter().map(|m| m.batch_size))
    };
    let ys = || {
        plot.series.iter().flat_map(|s| {
            s.measured
                .iter()
                .flat_map(|m| [m.mean_ms, m.p99_ms])
                .chain(s.fitted.iter().map(|f| f.1))
        })
    };
    let (Some((x_lo, x_hi)), Some((y_lo, y_hi))) = (extent(xs()), extent(ys())) else {
        return Err(bad_data(path, "the profile has no measured points"));
    };
    if let Some(bad) = ys().find(|v| !v.is_finite()) {
        return Err(bad_data(path, format!("latency {bad} is not finite")));
    }

    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let legend = legend(plot);
    let legend_px = legend_width_px(
        legend.iter().map(|e| e.label.chars().count()),
        sizes.tick,
        size.width_px,
    );
    let (chart_area, legend_area) = root.split_horizontally(size.width_px - legend_px);
    let (x0, x1) = padded(x_lo, x_hi);
    let (_, y1) = padded(y_lo.min(0.0), y_hi);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(12)
        .x_label_area_size(sizes.label * 3)
        .y_label_area_size(sizes.label * 4)
        .build_cartesian_2d(x0.min(0.0)..x1, 0.0..y1)
        .at(path)?;
    chart
        .configure_mesh()
        .x_desc("batch size (requests)")
        .y_desc("latency of one run (ms)")
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| compact(*v))
        .y_label_formatter(&|v| compact(*v))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .at(path)?;
    for (index, series) in plot.series.iter().enumerate() {
        draw_fit_series(&mut chart, series, series_colour(index), path)?;
    }
    draw_legend(&legend_area, &legend, sizes.tick, path)?;
    root.present().at(path)
}

/// The legend: one entry per series, then what the circles, crosses and dashes mean.
fn legend(plot: &ProfileFitPlot) -> Vec<LegendEntry> {
    let mut legend = series_legend(plot.series.iter().map(|s| s.label.as_str()));
    legend.push(LegendEntry {
        label: "measured mean (circles)".into(),
        colour: BLACK,
        mark: LegendMark::Square,
    });
    legend.push(LegendEntry {
        label: "measured p99 (crosses)".into(),
        colour: BLACK,
        mark: LegendMark::Cross,
    });
    legend.push(LegendEntry {
        label: "affine fit of the mean".into(),
        colour: BLACK,
        mark: LegendMark::Dashed(2),
    });
    legend
}

/// One series in `colour`: its fitted line dashed, its measured means as circles and its p99s
/// as crosses.
fn draw_fit_series(
    chart: &mut ChartContext<'_, Png<'_>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    series: &FitSeries,
    colour: RGBColor,
    path: &Path,
) -> Result<(), PlotError> {
    // Dashes: draw every other segment of the fitted line, each cut in four.
    for pair in series.fitted.windows(2) {
        let ((xa, ya), (xb, yb)) = (pair[0], pair[1]);
        for k in (0..8).step_by(2) {
            let t0 = k as f64 / 8.0;
            let t1 = (k + 1) as f64 / 8.0;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![
                        (xa + (xb - xa) * t0, ya + (yb - ya) * t0),
                        (xa + (xb - xa) * t1, ya + (yb - ya) * t1),
                    ],
                    colour.stroke_width(2),
                )))
                .at(path)?;
        }
    }
    chart
        .draw_series(
            series
                .measured
                .iter()
                .map(|m| Circle::new((m.batch_size, m.mean_ms), 6, colour.stroke_width(2))),
        )
        .at(path)?;
    chart
        .draw_series(
            series
                .measured
                .iter()
                .map(|m| Cross::new((m.batch_size, m.p99_ms), 6, colour.stroke_width(2))),
        )
        .at(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::{ink_fraction, png_size};

    fn plot() -> ProfileFitPlot {
        let series = [16.0, 64.0]
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let fit = |b: f64| 0.3 + 0.05 * b + 0.002 * b * len;
                let batches = [1.0, 2.0, 4.0, 8.0];
                FitSeries {
                    label: format!("seq={len}"),
                    measured: batches
                        .iter()
                        .map(|&b| MeasuredPoint {
                            batch_size: b,
                            mean_ms: fit(b) * (1.0 + 0.05 * i as f64),
                            p99_ms: fit(b) * 1.4,
                        })
                        .collect(),
                    fitted: batches.iter().map(|&b| (b, fit(b))).collect(),
                }
            })
            .collect();
        ProfileFitPlot {
            title: "classifier on CPU: measured vs fit".into(),
            series,
        }
    }

    #[test]
    fn profile_fit_renders_png_of_requested_size_with_marks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fit.png");
        draw_profile_fit(&plot(), PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
        let ink = ink_fraction(&path);
        assert!(ink > 0.01, "the chart is nearly blank: {ink}");
    }

    #[test]
    fn profile_fit_without_points_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.png");
        let empty = ProfileFitPlot {
            title: "t".into(),
            series: vec![],
        };
        let err = draw_profile_fit(&empty, PlotSize::DEFAULT, &path).unwrap_err();
        assert!(err.to_string().contains("empty.png"), "{err}");
    }

    #[test]
    fn slower_measurements_are_drawn_higher() {
        use crate::plot::test_support::Image;
        let dir = tempfile::tempdir().unwrap();
        let top_row = |plot: &ProfileFitPlot, name: &str| {
            let path = dir.path().join(name);
            draw_profile_fit(plot, PlotSize::DEFAULT, &path).unwrap();
            let image = Image::read(&path);
            let colour = series_colour(0);
            // The chart, left of the legend and below the title.
            (image.height as i32 / 10..image.height as i32)
                .find(|&y| {
                    image
                        .columns_of(y, colour)
                        .iter()
                        .any(|&x| x < image.width as i32 * 8 / 10)
                })
                .expect("the first length's marks are drawn")
        };
        let base = plot();
        let mut slower = base.clone();
        // The first length's p99 at batch 8 doubles and becomes the highest mark of the plot.
        slower.series[0].measured[3].p99_ms *= 3.0;
        let (before, after) = (top_row(&base, "base.png"), top_row(&slower, "slower.png"));
        assert!(after < before, "top row {after} should be above {before}");
    }
}
