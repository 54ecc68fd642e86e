//! Stage breakdown: stacked bars of the time spent in each stage, per configuration.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::Png;

use super::{
    DrawResult, FONT, LegendEntry, LegendMark, PlotError, PlotSize, TextSizes, bad_data, canvas,
    compact, draw_legend, legend_width_px, series_colour,
};

/// One configuration's time per stage.
#[derive(Debug, Clone, PartialEq)]
pub struct StageBars {
    /// The configuration, as the axis shows it.
    pub label: String,
    /// Mean time in each stage, milliseconds, in the plot's stage order.
    pub mean_ms: Vec<f64>,
    /// 99th-percentile time in each stage, milliseconds, in the plot's stage order.
    pub p99_ms: Vec<f64>,
}

/// A stage-breakdown plot: two panels (mean, p99), one horizontal stacked bar per
/// configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct StageBreakdownPlot {
    /// The title.
    pub title: String,
    /// Stage names in path order (network, gateway, queue, batch wait, execution, ...).
    pub stages: Vec<String>,
    /// One entry per configuration.
    pub bars: Vec<StageBars>,
}

/// Draws `plot` to the PNG at `path`. Per-stage p99s are stacked as given; their sum is not the
/// end-to-end p99, which the panel title says.
pub fn draw_stage_breakdown(
    plot: &StageBreakdownPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    if plot.bars.is_empty() || plot.stages.is_empty() {
        return Err(bad_data(path, "no configurations or no stages to draw"));
    }
    for bar in &plot.bars {
        if bar.mean_ms.len() != plot.stages.len() || bar.p99_ms.len() != plot.stages.len() {
            return Err(bad_data(
                path,
                format!(
                    "`{}` has {} mean and {} p99 values for {} stages",
                    bar.label,
                    bar.mean_ms.len(),
                    bar.p99_ms.len(),
                    plot.stages.len()
                ),
            ));
        }
        if let Some(bad) = bar
            .mean_ms
            .iter()
            .chain(&bar.p99_ms)
            .find(|v| !(v.is_finite() && **v >= 0.0))
        {
            return Err(bad_data(
                path,
                format!("`{}` has a negative or non-finite time {bad}", bar.label),
            ));
        }
    }
    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let legend: Vec<LegendEntry> = plot
        .stages
        .iter()
        .enumerate()
        .map(|(i, stage)| LegendEntry {
            label: stage.clone(),
            colour: series_colour(i),
            mark: LegendMark::Box,
        })
        .collect();
    let legend_px = legend_width_px(
        legend.iter().map(|e| e.label.chars().count()),
        sizes.tick,
        size.width_px,
    )
    .min(size.width_px / 6);
    let (charts, legend_area) = root.split_horizontally(size.width_px - legend_px);
    let panels = charts.split_evenly((2, 1));
    draw_panel(
        &panels[0],
        plot,
        |b| &b.mean_ms,
        "mean time per stage (ms)",
        sizes,
        path,
    )?;
    draw_panel(
        &panels[1],
        plot,
        |b| &b.p99_ms,
        "p99 time per stage (ms; stacked p99s, not the end-to-end p99)",
        sizes,
        path,
    )?;
    draw_legend(&legend_area, &legend, sizes.tick, path)?;
    root.present().at(path)
}

fn draw_panel(
    area: &DrawingArea<Png<'_>, Shift>,
    plot: &StageBreakdownPlot,
    values: fn(&StageBars) -> &Vec<f64>,
    x_desc: &str,
    sizes: TextSizes,
    path: &Path,
) -> Result<(), PlotError> {
    let count = plot.bars.len();
    let total = plot
        .bars
        .iter()
        .map(|b| values(b).iter().sum::<f64>())
        .fold(0.0, f64::max);
    let x_max = if total > 0.0 { total * 1.08 } else { 1.0 };
    let longest = plot
        .bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0);
    let label_px =
        ((longest as f64 * 0.55 * sizes.tick as f64) as u32 + 16).min(area.dim_in_pixel().0 / 3);
    // The first bar (the best configuration) on top: rows count down from count - 1.
    let labels: Vec<String> = plot.bars.iter().rev().map(|b| b.label.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(sizes.label * 3)
        .y_label_area_size(label_px)
        .build_cartesian_2d(0.0..x_max, -0.5..count as f64 - 0.5)
        .at(path)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| compact(*v))
        .y_labels(count)
        .y_label_formatter(&|v| super::category_label(&labels, *v))
        .disable_y_mesh()
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
        .at(path)?;
    for (row, bar) in plot.bars.iter().enumerate() {
        let mut start = 0.0;
        for (stage, &value) in values(bar).iter().enumerate() {
            let end = start + value;
            let y = (count - 1 - row) as f64;
            let rect = Rectangle::new(
                [(start, y - 0.35), (end, y + 0.35)],
                series_colour(stage).filled(),
            );
            chart.draw_series(std::iter::once(rect)).at(path)?;
            start = end;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::{ink_fraction, png_size};

    fn sample() -> StageBreakdownPlot {
        let stages: Vec<String> = [
            "network",
            "gateway",
            "queue",
            "batch wait",
            "execution",
            "postprocess",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let bars = (0..4)
            .map(|c| StageBars {
                label: format!("max_batch_size={} instances=2", 1 << c),
                mean_ms: vec![
                    2.0,
                    0.5,
                    10.0 / f64::from(c + 1),
                    1.0 * f64::from(c),
                    20.0 + 4.0 * f64::from(c),
                    1.0,
                ],
                p99_ms: vec![
                    6.0,
                    1.0,
                    60.0 / f64::from(c + 1),
                    2.0 * f64::from(c),
                    30.0 + 6.0 * f64::from(c),
                    2.0,
                ],
            })
            .collect();
        StageBreakdownPlot {
            title: "Where the time goes".into(),
            stages,
            bars,
        }
    }

    #[test]
    fn stage_breakdown_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("breakdown.png");
        draw_stage_breakdown(
            &sample(),
            PlotSize {
                width_px: 1000,
                height_px: 700,
            },
            &path,
        )
        .unwrap();
        assert_eq!(png_size(&path), (1000, 700));
    }

    #[test]
    fn single_configuration_bar_is_drawn() {
        let dir = tempfile::tempdir().unwrap();
        let mut plot = sample();
        plot.bars.truncate(1);
        let path = dir.path().join("breakdown_one.png");
        draw_stage_breakdown(&plot, PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
        let ink = ink_fraction(&path);
        assert!(
            ink > 0.2,
            "one bar per panel should be visible, but only {ink:.2} of pixels are drawn"
        );
    }

    #[test]
    fn mismatched_stage_counts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut plot = sample();
        plot.bars[2].p99_ms.pop();
        let err =
            draw_stage_breakdown(&plot, PlotSize::DEFAULT, &dir.path().join("b.png")).unwrap_err();
        assert!(
            err.to_string().contains("5 p99 values for 6 stages"),
            "{err}"
        );
    }

    #[test]
    fn bar_segments_are_as_long_as_their_stage_times_and_the_first_bar_is_on_top() {
        use crate::plot::test_support::Image;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segments.png");
        let plot = StageBreakdownPlot {
            title: "t".into(),
            stages: vec!["queue".into(), "execution".into()],
            bars: vec![
                StageBars {
                    label: "a".into(),
                    mean_ms: vec![10.0, 30.0],
                    p99_ms: vec![10.0, 30.0],
                },
                StageBars {
                    label: "b".into(),
                    mean_ms: vec![20.0, 5.0],
                    p99_ms: vec![20.0, 5.0],
                },
            ],
        };
        draw_stage_breakdown(&plot, PlotSize::DEFAULT, &path).unwrap();
        let image = Image::read(&path);
        let (queue, execution) = (series_colour(0), series_colour(1));
        // Rows crossing a bar in the top panel: the widest run of the queue colour per row.
        let bars: Vec<(i32, usize, usize)> = (0..image.height as i32 / 2)
            .map(|y| {
                (
                    y,
                    image.columns_of(y, queue).len(),
                    image.columns_of(y, execution).len(),
                )
            })
            .filter(|(_, q, e)| *q > 0 && *e > 0)
            .collect();
        let top = bars.first().expect("a bar in the top panel");
        let bottom = bars.last().unwrap();
        assert!(top.0 < bottom.0);
        // Bar "a" (first) is on top: queue 10 ms, execution 30 ms, so execution is 3x as long.
        let ratio = top.2 as f64 / top.1 as f64;
        assert!(
            (ratio - 3.0).abs() < 0.15,
            "top bar execution/queue {ratio}, expected 3"
        );
        let ratio = bottom.1 as f64 / bottom.2 as f64;
        assert!(
            (ratio - 4.0).abs() < 0.25,
            "bottom bar queue/execution {ratio}, expected 4"
        );
        // The same scale in one panel: a's queue is half b's.
        let ratio = top.1 as f64 / bottom.1 as f64;
        assert!(
            (ratio - 0.5).abs() < 0.05,
            "queue a/b {ratio}, expected 0.5"
        );
    }
}
