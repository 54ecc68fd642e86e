//! One latency percentile of every configuration in one panel, each line ending at the
//! configuration's capacity and labelled at its end (no separate legend to look up).

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::Png;

use super::{
    DrawResult, FONT, PlotError, PlotSize, SLO_COLOUR, TextSizes, bad_data, canvas, compact, elide,
    extent, legend_width_px, log_padded, padded, series_colour, wants_log,
};

/// One configuration's line.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigLine {
    /// The configuration, as its end label shows it.
    pub label: String,
    /// (offered load in req/s, latency in ms), in increasing load, up to where the line ends.
    pub points: Vec<(f64, f64)>,
    /// The capacity in req/s the line ends at (its last point), or `None` when no load met the
    /// SLO (the line is then dashed).
    pub capacity_rps: Option<f64>,
}

/// The figure.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyByConfigPlot {
    /// The title.
    pub title: String,
    /// The y axis' name, e.g. `e2e p99 latency`.
    pub y_name: String,
    /// One line per configuration, best first; each gets a colour in the order of the shared
    /// series palette.
    pub lines: Vec<ConfigLine>,
    /// The SLO bound drawn as a horizontal line, milliseconds.
    pub slo_ms: Option<f64>,
    /// The SLO as its label shows it.
    pub slo_label: String,
}

/// Draws `plot` to the PNG at `path`: each line in its colour with a dot at its end, and its
/// label (`configuration · capacity req/s`) in a column right of the chart at the end's height,
/// pushed apart where ends are close, with a thin leader from the end to the label.
pub fn draw_latency_by_config(
    plot: &LatencyByConfigPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    draw_mapped(plot, size, path, &[]).map(|_| ())
}

/// [`draw_latency_by_config`], also returning the pixel of each (load, latency) in `probes`.
pub(crate) fn draw_mapped(
    plot: &LatencyByConfigPlot,
    size: PlotSize,
    path: &Path,
    probes: &[(f64, f64)],
) -> Result<Vec<(i32, i32)>, PlotError> {
    let points = || plot.lines.iter().flat_map(|l| l.points.iter());
    if points().next().is_none() {
        return Err(bad_data(path, "no points to draw"));
    }
    let valid = |v: f64| v.is_finite() && v >= 0.0;
    if let Some(line) = plot
        .lines
        .iter()
        .find(|l| l.points.iter().any(|p| !(valid(p.0) && valid(p.1))))
    {
        return Err(bad_data(
            path,
            format!("{}: a point is negative or not finite", line.label),
        ));
    }
    let (_, x_hi) = extent(points().map(|p| p.0)).unwrap_or((0.0, 1.0));
    let (y_lo, y_hi) = extent(points().map(|p| p.1).chain(plot.slo_ms)).unwrap_or((0.0, 1.0));
    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let labels: Vec<String> = plot.lines.iter().map(end_label).collect();
    let gutter_px = legend_width_px(
        labels.iter().map(|l| l.chars().count()),
        sizes.tick,
        size.width_px,
    );
    let (chart_area, gutter) = root.split_horizontally(size.width_px - gutter_px);
    let x_range = 0.0..padded(0.0, x_hi).1;
    if wants_log(y_lo, y_hi) {
        let (lo, hi) = log_padded(y_lo, y_hi);
        draw_chart(
            &root,
            &chart_area,
            &gutter,
            plot,
            &labels,
            (x_range, (lo..hi).log_scale()),
            sizes,
            path,
            probes,
        )
    } else {
        let (_, hi) = padded(y_lo, y_hi);
        draw_chart(
            &root,
            &chart_area,
            &gutter,
            plot,
            &labels,
            (x_range, 0.0..hi),
            sizes,
            path,
            probes,
        )
    }
    .and_then(|mapped| root.present().at(path).map(|_| mapped))
}

fn end_label(line: &ConfigLine) -> String {
    match line.capacity_rps {
        Some(c) => format!("{} · {} req/s", line.label, compact_rate(c)),
        None => format!("{} · no capacity", line.label),
    }
}

fn compact_rate(rps: f64) -> String {
    if rps >= 100.0 {
        format!("{rps:.0}")
    } else if rps >= 10.0 {
        format!("{rps:.1}")
    } else {
        format!("{rps:.2}")
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_chart<Y>(
    root: &DrawingArea<Png<'_>, Shift>,
    area: &DrawingArea<Png<'_>, Shift>,
    gutter: &DrawingArea<Png<'_>, Shift>,
    plot: &LatencyByConfigPlot,
    labels: &[String],
    (x_range, y_range): (std::ops::Range<f64>, Y),
    sizes: TextSizes,
    path: &Path,
    probes: &[(f64, f64)],
) -> Result<Vec<(i32, i32)>, PlotError>
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
        .x_desc("offered load (req/s)")
        .y_desc(format!("{} (ms)", plot.y_name))
        .axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| compact(*v))
        .y_label_formatter(&|v| compact(*v))
        .y_labels(10)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.10))
        .draw()
        .at(path)?;
    let x_end = chart.x_range().end;
    if let Some(slo_ms) = plot.slo_ms {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, slo_ms), (x_end, slo_ms)],
                12,
                6,
                SLO_COLOUR.stroke_width(2),
            ))
            .at(path)?;
        let (x, y) = chart.backend_coord(&(0.0, slo_ms));
        let base = area.get_base_pixel();
        area.draw_text(
            &plot.slo_label,
            &TextStyle::from((FONT, sizes.tick)).color(&SLO_COLOUR),
            (x - base.0 + 6, y - base.1 - sizes.tick as i32 - 4),
        )
        .at(path)?;
    }
    let mut ends = Vec::new();
    for (index, line) in plot.lines.iter().enumerate() {
        let colour = series_colour(index);
        if line.capacity_rps.is_some() {
            chart
                .draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    colour.stroke_width(3),
                ))
                .at(path)?;
        } else {
            chart
                .draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    8,
                    6,
                    colour.stroke_width(2),
                ))
                .at(path)?;
        }
        if let Some(&end) = line.points.last() {
            chart
                .draw_series(std::iter::once(Circle::new(end, 6, colour.filled())))
                .at(path)?;
            ends.push((index, chart.backend_coord(&end)));
        }
    }
    draw_end_labels(root, gutter, &ends, labels, sizes.tick, path)?;
    Ok(probes.iter().map(|p| chart.backend_coord(p)).collect())
}

/// Labels in the gutter at their line ends' heights, pushed apart to one text row each, with a
/// leader from each end to its label.
fn draw_end_labels(
    root: &DrawingArea<Png<'_>, Shift>,
    gutter: &DrawingArea<Png<'_>, Shift>,
    ends: &[(usize, (i32, i32))],
    labels: &[String],
    text_px: u32,
    path: &Path,
) -> Result<(), PlotError> {
    let (width, height) = gutter.dim_in_pixel();
    let (base_x, base_y) = gutter.get_base_pixel();
    let row = text_px as i32 + 4;
    let mut order: Vec<(usize, (i32, i32))> = ends.to_vec();
    order.sort_by_key(|(_, (_, y))| *y);
    // Push down where labels would overlap, then back up from the bottom edge.
    let mut ys: Vec<i32> = Vec::with_capacity(order.len());
    for (_, (_, y)) in &order {
        let wanted = (y - base_y).max(row / 2);
        let y = ys.last().map_or(wanted, |&prev| wanted.max(prev + row));
        ys.push(y);
    }
    let bottom = height as i32 - row / 2;
    for i in (0..ys.len()).rev() {
        let limit = if i + 1 < ys.len() {
            ys[i + 1] - row
        } else {
            bottom
        };
        ys[i] = ys[i].min(limit);
    }
    let style = TextStyle::from((FONT, text_px)).color(&BLACK);
    for ((index, (end_x, end_y)), y) in order.iter().zip(&ys) {
        let colour = series_colour(*index);
        let label = elide(
            &labels[*index],
            (width as usize).saturating_sub(24),
            text_px,
        );
        // The leader runs from the chart into the gutter, so it is drawn on the whole figure.
        let (root_x, root_y) = root.get_base_pixel();
        root.draw(&PathElement::new(
            vec![
                (end_x - root_x, end_y - root_y),
                (base_x + 4 - root_x, base_y + y - root_y),
                (base_x + 12 - root_x, base_y + y - root_y),
            ],
            colour.mix(0.7).stroke_width(1),
        ))
        .at(path)?;
        gutter
            .draw_text(&label, &style, (16, y - text_px as i32 / 2))
            .at(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::{Image, png_size};

    fn sample() -> LatencyByConfigPlot {
        let lines = (1..=4)
            .map(|c| {
                let capacity = 80.0 * f64::from(c);
                let points = (1..=c * 2)
                    .map(|i| {
                        let load = 40.0 * f64::from(i);
                        (load, 20.0 + 80.0 * (load / capacity).powi(3))
                    })
                    .collect();
                ConfigLine {
                    label: format!("instances={c}"),
                    points,
                    capacity_rps: (c > 1).then_some(capacity),
                }
            })
            .collect();
        LatencyByConfigPlot {
            title: "e2e p99 by configuration".into(),
            y_name: "e2e p99 latency".into(),
            lines,
            slo_ms: Some(100.0),
            slo_label: "SLO e2e.p99<=100ms".into(),
        }
    }

    #[test]
    fn latency_by_config_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("by_config.png");
        draw_latency_by_config(&sample(), PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
    }

    #[test]
    fn each_line_ends_with_its_dot_at_its_last_point_and_goes_no_further() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ends.png");
        let plot = sample();
        let ends: Vec<(f64, f64)> = plot
            .lines
            .iter()
            .map(|l| *l.points.last().unwrap())
            .collect();
        let beyond: Vec<(f64, f64)> = ends.iter().map(|&(x, y)| (x + 30.0, y)).collect();
        let probes: Vec<(f64, f64)> = ends.iter().chain(&beyond).copied().collect();
        let pixels = draw_mapped(&plot, PlotSize::DEFAULT, &path, &probes).unwrap();
        let image = Image::read(&path);
        for (i, line) in plot.lines.iter().enumerate() {
            let colour = series_colour(i);
            assert!(
                image.has_colour_near(pixels[i], colour, 2),
                "{}: no end dot at {:?}",
                line.label,
                pixels[i]
            );
            // 30 req/s right of the end, nothing of this colour on that row (ends at capacity).
            assert!(
                !image.has_colour_near(pixels[i + plot.lines.len()], colour, 2),
                "{}: the line goes past its end",
                line.label
            );
        }
    }

    #[test]
    fn slo_line_moves_with_the_slo() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = Vec::new();
        for slo in [60.0, 120.0] {
            let path = dir.path().join(format!("slo_{slo}.png"));
            let mut plot = sample();
            plot.slo_ms = Some(slo);
            let pixels = draw_mapped(&plot, PlotSize::DEFAULT, &path, &[(5.0, slo)]).unwrap();
            let (x, y) = pixels[0];
            let image = Image::read(&path);
            assert!(
                image.has_colour_near((x, y), SLO_COLOUR, 2),
                "no SLO line at {:?} for {slo} ms",
                (x, y)
            );
            rows.push(y);
        }
        assert!(rows[1] < rows[0], "rows {rows:?}");
    }

    #[test]
    fn lines_with_bad_points_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut plot = sample();
        plot.lines[2].points[1].1 = f64::INFINITY;
        let err = draw_latency_by_config(&plot, PlotSize::DEFAULT, &dir.path().join("x.png"))
            .unwrap_err();
        assert!(err.to_string().contains("instances=3"), "{err}");
    }
}
