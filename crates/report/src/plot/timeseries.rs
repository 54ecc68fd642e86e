//! Time series over one replay: queue depth, batch size, utilization, one panel each.

use std::path::Path;

use plotters::prelude::*;

use super::{
    DrawResult, FONT, PlotError, PlotSize, TextSizes, bad_data, canvas, compact, padded,
    series_colour,
};

/// One panel: a quantity over time.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSeriesPanel {
    /// What is measured, with its unit, e.g. `queue depth (requests)`.
    pub name: String,
    /// (time since the start of the run in seconds, value), time increasing.
    pub points: Vec<(f64, f64)>,
}

/// Stacked panels sharing a time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSeriesPlot {
    /// The title, which should name the configuration and load.
    pub title: String,
    /// Panels from top to bottom.
    pub panels: Vec<TimeSeriesPanel>,
}

/// Draws each panel as a line over time to the PNG at `path`.
pub fn draw_time_series(
    plot: &TimeSeriesPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    if plot.panels.is_empty() || plot.panels.iter().any(|p| p.points.is_empty()) {
        return Err(bad_data(path, "no panels, or a panel with no points"));
    }
    for panel in &plot.panels {
        if let Some(bad) = panel
            .points
            .iter()
            .find(|(t, v)| !(t.is_finite() && v.is_finite()))
        {
            return Err(bad_data(
                path,
                format!("`{}` has a non-finite point {bad:?}", panel.name),
            ));
        }
    }
    let t_max = plot
        .panels
        .iter()
        .flat_map(|p| p.points.iter().map(|(t, _)| *t))
        .fold(0.0, f64::max);
    let t_end = if t_max > 0.0 { t_max } else { 1.0 };
    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let areas = root.split_evenly((plot.panels.len(), 1));
    for (index, (panel, area)) in plot.panels.iter().zip(&areas).enumerate() {
        let (lo, hi) = panel
            .points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, v)| {
                (lo.min(*v), hi.max(*v))
            });
        // A quantity that stays at 0 (an empty queue) still gets an axis of whole units.
        let (y_lo, y_hi) = padded(lo.min(0.0), hi.max(if hi <= 0.0 { 1.0 } else { hi }));
        let last = index + 1 == plot.panels.len();
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .x_label_area_size(if last { sizes.label * 3 } else { sizes.label })
            .y_label_area_size(sizes.label * 4)
            .caption(&panel.name, (FONT, sizes.label))
            .build_cartesian_2d(
                0.0..t_end,
                y_lo.max(if lo >= 0.0 { 0.0 } else { y_lo })..y_hi,
            )
            .at(path)?;
        let mut mesh = chart.configure_mesh();
        mesh.label_style((FONT, sizes.tick))
            .axis_desc_style((FONT, sizes.label))
            .x_label_formatter(&|v| compact(*v))
            .y_label_formatter(&|v| compact(*v))
            .y_labels(5)
            .light_line_style(WHITE.mix(0.0))
            .bold_line_style(BLACK.mix(0.12));
        if last {
            mesh.x_desc("time since start of run (s)");
        }
        mesh.draw().at(path)?;
        chart
            .draw_series(LineSeries::new(
                panel.points.iter().copied(),
                series_colour(index).stroke_width(2),
            ))
            .at(path)?;
    }
    root.present().at(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::png_size;

    #[test]
    fn time_series_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let t = |i: u32| f64::from(i) * 0.1;
        let plot = TimeSeriesPlot {
            title: "Replay at 2x: batch_size=8 instances=2".into(),
            panels: vec![
                TimeSeriesPanel {
                    name: "queue depth (requests)".into(),
                    points: (0..600).map(|i| (t(i), f64::from((i * 37) % 23))).collect(),
                },
                TimeSeriesPanel {
                    name: "mean batch size (requests)".into(),
                    points: (0..600)
                        .map(|i| (t(i), 1.0 + f64::from((i * 13) % 8)))
                        .collect(),
                },
                TimeSeriesPanel {
                    name: "utilization (fraction busy)".into(),
                    points: (0..600)
                        .map(|i| (t(i), 0.5 + 0.4 * (f64::from(i) / 40.0).sin()))
                        .collect(),
                },
            ],
        };
        let path = dir.path().join("timeseries.png");
        draw_time_series(&plot, PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
    }

    #[test]
    fn a_step_in_the_data_is_a_step_in_the_line() {
        use crate::plot::test_support::Image;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("step.png");
        // Queue at 2, then 5, then 8, a third of the run each.
        let points = (0..=90)
            .map(|t| (f64::from(t), 2.0 + 3.0 * f64::from(t.min(89) / 30)))
            .collect();
        let plot = TimeSeriesPlot {
            title: "t".into(),
            panels: vec![TimeSeriesPanel {
                name: "queue depth (requests)".into(),
                points,
            }],
        };
        draw_time_series(&plot, PlotSize::DEFAULT, &path).unwrap();
        let image = Image::read(&path);
        let colour = series_colour(0);
        let columns = image.columns_of_colour(colour);
        let (first, last) = (columns[0], columns[columns.len() - 1]);
        let row = |sixth: i32| {
            let x = first + sixth * (last - first) / 6;
            let rows = image.rows_of(x, colour);
            assert!(!rows.is_empty(), "no line in column {x}");
            rows.iter().sum::<i32>() / rows.len() as i32
        };
        let (r2, r5, r8) = (row(1), row(3), row(5));
        assert!(
            r8 < r5 && r5 < r2,
            "higher values higher up: rows {r2}, {r5}, {r8}"
        );
        // Equal steps in the data are equal steps on the canvas (a linear axis).
        assert!(((r2 - r5) - (r5 - r8)).abs() <= 2, "rows {r2}, {r5}, {r8}");
    }

    #[test]
    fn an_all_zero_series_is_drawn_on_a_whole_unit_axis() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zero.png");
        let plot = TimeSeriesPlot {
            title: "t".into(),
            panels: vec![TimeSeriesPanel {
                name: "queue depth (requests)".into(),
                points: vec![(0.0, 0.0), (10.0, 0.0)],
            }],
        };
        draw_time_series(&plot, PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
    }
}
