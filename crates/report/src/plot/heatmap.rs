//! A capacity heatmap over two grid axes.

use std::path::Path;

use plotters::prelude::*;

use super::{DrawResult, FONT, PlotError, PlotSize, TextSizes, bad_data, canvas, compact};

/// Capacity over two grid axes; `values[row * columns + column]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityHeatmap {
    /// The title.
    pub title: String,
    /// The x axis's name, e.g. `batcher.max_batch_size`.
    pub x_name: String,
    /// Column labels (x axis values).
    pub x_labels: Vec<String>,
    /// The y axis's name, e.g. `instances`.
    pub y_name: String,
    /// Row labels (y axis values), bottom to top.
    pub y_labels: Vec<String>,
    /// Capacity in requests per second per cell, row-major; `None` for a cell not run or with
    /// no sustainable load.
    pub values_rps: Vec<Option<f64>>,
}

/// Draws the heatmap to the PNG at `path`: cell colour from pale (low capacity) to dark blue
/// (high), each cell labelled with its capacity in req/s; grey cells have none.
pub fn draw_capacity_heatmap(
    plot: &CapacityHeatmap,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    let (columns, rows) = (plot.x_labels.len(), plot.y_labels.len());
    if columns == 0 || rows == 0 || plot.values_rps.len() != columns * rows {
        return Err(bad_data(
            path,
            format!(
                "{} values for {columns} columns x {rows} rows",
                plot.values_rps.len()
            ),
        ));
    }
    if let Some(bad) = plot
        .values_rps
        .iter()
        .flatten()
        .find(|v| !(v.is_finite() && **v >= 0.0))
    {
        return Err(bad_data(
            path,
            format!("capacity {bad} is negative or not finite"),
        ));
    }
    let max = plot
        .values_rps
        .iter()
        .flatten()
        .fold(0.0, |m: f64, v| m.max(*v));
    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let longest = plot
        .y_labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    let mut chart = ChartBuilder::on(&root)
        .margin(16)
        .x_label_area_size(sizes.label * 3)
        .y_label_area_size(
            ((longest as f64 * 0.6 * sizes.tick as f64) as u32 + sizes.label * 2)
                .max(sizes.label * 4),
        )
        .build_cartesian_2d(-0.5..columns as f64 - 0.5, -0.5..rows as f64 - 0.5)
        .at(path)?;
    let label = |labels: &[String], v: &f64| super::category_label(labels, *v);
    chart
        .configure_mesh()
        .x_desc(&plot.x_name)
        .y_desc(&plot.y_name)
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_labels(columns)
        .y_labels(rows)
        .x_label_formatter(&|v| label(&plot.x_labels, v))
        .y_label_formatter(&|v| label(&plot.y_labels, v))
        .disable_mesh()
        .draw()
        .at(path)?;
    for row in 0..rows {
        for column in 0..columns {
            let value = plot.values_rps[row * columns + column];
            let colour = match value {
                Some(v) if max > 0.0 => blues(v / max),
                Some(_) => blues(0.0),
                None => RGBColor(200, 200, 200),
            };
            let (x, y) = (column as f64, row as f64);
            let cell = [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)];
            chart
                .draw_series(std::iter::once(Rectangle::new(cell, colour.filled())))
                .at(path)?;
            chart
                .draw_series(std::iter::once(Rectangle::new(cell, WHITE.stroke_width(2))))
                .at(path)?;
            let text = value.map_or("none".to_string(), |v| format!("{} req/s", compact(v)));
            let dark = value.is_some_and(|v| max > 0.0 && v / max > 0.55);
            let style = TextStyle::from((FONT, sizes.label))
                .color(if dark { &WHITE } else { &BLACK })
                .pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Center,
                ));
            chart
                .draw_series(std::iter::once(Text::new(text, (x, y), style)))
                .at(path)?;
        }
    }
    root.present().at(path)
}

/// A white-to-blue ramp for `t` in [0, 1].
fn blues(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let mix = |pale: f64, dark: f64| (pale + (dark - pale) * t).round() as u8;
    RGBColor(mix(239.0, 8.0), mix(243.0, 48.0), mix(255.0, 107.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::{ink_fraction, png_size};

    #[test]
    fn capacity_heatmap_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let x_labels: Vec<String> = [1, 4, 8, 16, 32].iter().map(|v| v.to_string()).collect();
        let y_labels: Vec<String> = (1..=4).map(|v| v.to_string()).collect();
        let values_rps = (0..4)
            .flat_map(|row| {
                (0..5).map(move |column| {
                    (column + row > 0)
                        .then(|| 120.0 * f64::from(row + 1) * (1.0 + f64::from(column)).sqrt())
                })
            })
            .collect();
        let plot = CapacityHeatmap {
            title: "Capacity under e2e.p99<=800ms".into(),
            x_name: "batcher.max_batch_size".into(),
            x_labels,
            y_name: "instances".into(),
            y_labels,
            values_rps,
        };
        let path = dir.path().join("heatmap.png");
        draw_capacity_heatmap(
            &plot,
            PlotSize {
                width_px: 900,
                height_px: 700,
            },
            &path,
        )
        .unwrap();
        assert_eq!(png_size(&path), (900, 700));
        let ink = ink_fraction(&path);
        assert!(
            ink > 0.5,
            "the cells should fill the chart, but only {ink:.2} of pixels are drawn"
        );
    }

    #[test]
    fn single_cell_heatmap_renders() {
        let dir = tempfile::tempdir().unwrap();
        let plot = CapacityHeatmap {
            title: "one cell".into(),
            x_name: "x".into(),
            x_labels: vec!["a".into()],
            y_name: "y".into(),
            y_labels: vec!["b".into()],
            values_rps: vec![Some(12.0)],
        };
        let path = dir.path().join("heatmap_one.png");
        draw_capacity_heatmap(&plot, PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
        let ink = ink_fraction(&path);
        assert!(
            ink > 0.5,
            "one cell should fill the chart, but only {ink:.2} of pixels are drawn"
        );
    }

    #[test]
    fn wrong_cell_count_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plot = CapacityHeatmap {
            title: "t".into(),
            x_name: "x".into(),
            x_labels: vec!["a".into(), "b".into()],
            y_name: "y".into(),
            y_labels: vec!["c".into()],
            values_rps: vec![Some(1.0)],
        };
        let err =
            draw_capacity_heatmap(&plot, PlotSize::DEFAULT, &dir.path().join("h.png")).unwrap_err();
        assert!(
            err.to_string().contains("1 values for 2 columns x 1 rows"),
            "{err}"
        );
    }

    #[test]
    fn cells_are_coloured_by_capacity_at_their_grid_place() {
        use crate::plot::test_support::Image;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cells.png");
        // Two columns, two rows (bottom row first): 10, 20 / 30, 40.
        let plot = CapacityHeatmap {
            title: "t".into(),
            x_name: "delay".into(),
            x_labels: vec!["0ms".into(), "2ms".into()],
            y_name: "instances".into(),
            y_labels: vec!["1".into(), "2".into()],
            values_rps: vec![Some(10.0), Some(20.0), Some(30.0), Some(40.0)],
        };
        draw_capacity_heatmap(&plot, PlotSize::DEFAULT, &path).unwrap();
        let image = Image::read(&path);
        let centre = |value: f64| {
            let colour = blues(value / 40.0);
            let mut found = (0i64, 0i64, 0i64);
            for y in 0..image.height as i32 {
                for x in image.columns_of(y, colour) {
                    found = (found.0 + i64::from(x), found.1 + i64::from(y), found.2 + 1);
                }
            }
            assert!(
                found.2 > 10_000,
                "the {value} req/s cell is not filled with its colour"
            );
            (found.0 / found.2, found.1 / found.2)
        };
        let (c10, c20, c30, c40) = (centre(10.0), centre(20.0), centre(30.0), centre(40.0));
        assert!(c10.0 < c20.0 && c30.0 < c40.0, "columns left to right");
        assert!(
            c30.1 < c10.1 && c40.1 < c20.1,
            "the second row above the first"
        );
    }
}
