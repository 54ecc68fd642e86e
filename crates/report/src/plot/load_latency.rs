//! Latency against offered load, one small panel per configuration (the sweep's main figure).
//!
//! Every panel shares the same axes, so the eye compares heights and positions across panels
//! without reading ticks. p50, p95 and p99 keep one colour each in every panel, the SLO is a red
//! dashed line, and the capacity found by the search is a green vertical line over a pale band
//! (its 95% interval across seeds), labelled with its number. Where the achieved throughput falls
//! behind the offered load, a grey whisker runs from the p99 point left to the achieved rate, so
//! the saturation the old throughput-on-x curves showed as lines folding back stays visible.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::Png;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::capacity::Limit;

use super::{
    DrawResult, FONT, PlotError, PlotSize, TextSizes, bad_data, canvas, compact, elide, extent,
    log_padded, padded, wants_log,
};

/// Colour of p50 in every panel (light blue: the percentiles are one sequential hue, darker for
/// the tail).
pub const P50_COLOUR: RGBColor = RGBColor(107, 174, 214);
/// Colour of p95.
pub const P95_COLOUR: RGBColor = RGBColor(33, 113, 181);
/// Colour of p99 (the darkest and thickest line: the SLO is usually on it).
pub const P99_COLOUR: RGBColor = RGBColor(8, 48, 107);
/// Colour of the SLO line.
pub const SLO_COLOUR: RGBColor = RGBColor(214, 39, 40);
/// Colour of the capacity line and its interval band.
pub const CAPACITY_COLOUR: RGBColor = RGBColor(35, 139, 69);
/// Colour of the achieved-throughput whiskers.
pub const ACHIEVED_COLOUR: RGBColor = RGBColor(150, 150, 150);

/// Achieved throughput this far below offered (as a fraction) gets a whisker.
const DEPARTURE_FRACTION: f64 = 0.05;

/// One load point of a configuration: offered and achieved rate and the latency percentiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadPoint {
    /// Offered load, requests per second (the x position).
    pub offered_rps: f64,
    /// Achieved throughput, requests per second.
    pub achieved_rps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 95th-percentile latency, milliseconds.
    pub p95_ms: f64,
    /// 99th-percentile latency, milliseconds.
    pub p99_ms: f64,
}

/// A configuration's capacity under the SLO, as the sweep found it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityMark {
    /// Mean capacity over seeds, requests per second (0 when no load met the SLO).
    pub rps: f64,
    /// Low end of the 95% interval, requests per second.
    pub low_rps: f64,
    /// High end of the 95% interval, requests per second.
    pub high_rps: f64,
    /// Seeds the interval is over (1 gives no interval).
    pub seeds: usize,
    /// Whether the capacity lay at the top of the searched range (a lower bound only).
    pub lower_bound: bool,
    /// What ends the curve: the conditions that failed at the lowest load the capacity search
    /// found unsustainable, over every seed (empty when none did).
    pub limited_by: Vec<Limit>,
    /// The SLO's percentile measured by the capacity search's own runs at capacity (the mean
    /// over seeds), milliseconds; drawn as a dot on the capacity line.
    pub latency_ms: Option<f64>,
}

impl CapacityMark {
    /// The label drawn beside the capacity line: `capacity 27.0 req/s`, the interval
    /// (`95% CI 26.1–27.9, 3 seeds`, or `1 seed: no interval`) and what ends the curve
    /// (`ends: SLO crossed`), when something does.
    pub fn label_lines(&self) -> Vec<String> {
        let bound = if self.lower_bound { "≥ " } else { "" };
        let first = if self.rps > 0.0 {
            format!("capacity {bound}{} req/s", number(self.rps))
        } else {
            "no load was sustainable".to_string()
        };
        let second = if self.seeds > 1 {
            format!(
                "95% CI {}–{}, {} seeds",
                number(self.low_rps),
                number(self.high_rps),
                self.seeds
            )
        } else {
            "1 seed: no interval".to_string()
        };
        let mut lines = vec![first, second];
        if !self.limited_by.is_empty() {
            let words: Vec<&str> = self.limited_by.iter().map(|l| l.short_words()).collect();
            lines.push(format!("ends: {}", words.join(", ")));
        }
        lines
    }
}

/// Formats a rate for a label: three significant figures at most.
fn number(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// One configuration's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadPanel {
    /// The configuration, as the panel's caption shows it.
    pub label: String,
    /// Points in increasing offered load.
    pub points: Vec<LoadPoint>,
    /// Its capacity, when the sweep found one.
    pub capacity: Option<CapacityMark>,
}

/// The small-multiples figure: one panel per configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadLatencyPlot {
    /// The title.
    pub title: String,
    /// The latency metric, for the y axis' name (e.g. `e2e`, `ttft`).
    pub metric: String,
    /// Panels in rank order (best first), at most 12.
    pub panels: Vec<LoadPanel>,
    /// The SLO bound on this metric, milliseconds.
    pub slo_ms: Option<f64>,
    /// The SLO as the legend shows it, e.g. `SLO e2e.p99<=100ms`.
    pub slo_label: String,
    /// A line under the panels, e.g. which configurations were left out; empty for none.
    pub note: String,
}

/// Most panels in one figure.
pub const MAX_PANELS: usize = 12;

/// Draws `plot` to the PNG at `path`. Panels are laid out in up to 3 columns, all with the same
/// x range (0 to the largest offered load or capacity) and y range (logarithmic when latencies
/// span more than a factor of 30).
pub fn draw_load_latency(
    plot: &LoadLatencyPlot,
    size: PlotSize,
    path: &Path,
) -> Result<(), PlotError> {
    draw_load_latency_mapped(plot, size, path, &[]).map(|_| ())
}

/// [`draw_load_latency`], also returning the pixel position of each `(panel, offered rps,
/// latency ms)` in `probes`.
pub(crate) fn draw_load_latency_mapped(
    plot: &LoadLatencyPlot,
    size: PlotSize,
    path: &Path,
    probes: &[(usize, f64, f64)],
) -> Result<Vec<(i32, i32)>, PlotError> {
    validate(plot, path)?;
    let points = || plot.panels.iter().flat_map(|p| p.points.iter());
    let capacities = plot
        .panels
        .iter()
        .filter_map(|p| p.capacity.as_ref())
        .map(|c| c.high_rps.max(c.rps));
    let (_, x_hi) = extent(points().map(|p| p.offered_rps).chain(capacities)).unwrap_or((0.0, 1.0));
    let x_range = 0.0..padded(0.0, x_hi).1;
    let latencies = points()
        .flat_map(|p| [p.p50_ms, p.p95_ms, p.p99_ms])
        .chain(plot.slo_ms);
    let (y_lo, y_hi) = extent(latencies).unwrap_or((0.0, 1.0));

    let root = canvas(path, size)?;
    let sizes = TextSizes::for_size(size);
    let root = root.titled(&plot.title, (FONT, sizes.title)).at(path)?;
    let (legend_area, rest) = root.split_vertically(sizes.tick * 2);
    draw_key(&legend_area, plot, sizes.tick, path)?;
    let grid_area = if plot.note.is_empty() {
        rest
    } else {
        let (_, h) = rest.dim_in_pixel();
        let (grid_area, note_area) = rest.split_vertically(h.saturating_sub(sizes.tick * 2));
        note_area
            .draw_text(
                &plot.note,
                &TextStyle::from((FONT, sizes.tick)).color(&RGBColor(60, 60, 60)),
                (12, sizes.tick as i32 / 3),
            )
            .at(path)?;
        grid_area
    };
    let count = plot.panels.len();
    let columns = match count {
        1 => 1,
        2 | 4 => 2,
        _ => 3,
    };
    let rows = count.div_ceil(columns);
    let areas = grid_area.split_evenly((rows, columns));
    let log = wants_log(y_lo, y_hi);
    let mut mapped = vec![(0, 0); probes.len()];
    for (index, (panel, area)) in plot.panels.iter().zip(&areas).enumerate() {
        let frame = Frame {
            left_column: index % columns == 0,
            bottom_row: index / columns == rows - 1 || index + columns >= count,
            log,
        };
        let wanted: Vec<(usize, f64, f64)> = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 == index)
            .map(|(i, p)| (i, p.1, p.2))
            .collect();
        let found = if log {
            let (lo, hi) = log_padded(y_lo, y_hi);
            draw_panel(
                area,
                plot,
                panel,
                (x_range.clone(), (lo..hi).log_scale()),
                frame,
                sizes,
                path,
                &wanted,
            )?
        } else {
            let (_, hi) = padded(y_lo, y_hi);
            draw_panel(
                area,
                plot,
                panel,
                (x_range.clone(), 0.0..hi),
                frame,
                sizes,
                path,
                &wanted,
            )?
        };
        for (i, pixel) in found {
            mapped[i] = pixel;
        }
    }
    root.present().at(path)?;
    Ok(mapped)
}

fn validate(plot: &LoadLatencyPlot, path: &Path) -> Result<(), PlotError> {
    if plot.panels.iter().all(|p| p.points.is_empty()) {
        return Err(bad_data(path, "no load points to draw"));
    }
    if plot.panels.len() > MAX_PANELS {
        return Err(bad_data(
            path,
            format!(
                "{} panels; at most {MAX_PANELS} fit one figure",
                plot.panels.len()
            ),
        ));
    }
    let valid = |v: f64| v.is_finite() && v >= 0.0;
    for panel in &plot.panels {
        if let Some(bad) = panel.points.iter().find(|p| {
            ![p.offered_rps, p.achieved_rps, p.p50_ms, p.p95_ms, p.p99_ms]
                .into_iter()
                .all(valid)
        }) {
            return Err(bad_data(
                path,
                format!(
                    "{}: a point is negative or not finite: {bad:?}",
                    panel.label
                ),
            ));
        }
        if let Some(c) = &panel.capacity
            && ![c.rps, c.low_rps, c.high_rps]
                .into_iter()
                .chain(c.latency_ms)
                .all(valid)
        {
            return Err(bad_data(
                path,
                format!("{}: capacity is negative or not finite: {c:?}", panel.label),
            ));
        }
    }
    Ok(())
}

/// A probe's index and the pixel (column, row) its data maps to.
type ProbePixel = (usize, (i32, i32));

/// Which axis labels a panel carries (shared axes are named once, at the figure's edges).
#[derive(Debug, Clone, Copy)]
struct Frame {
    left_column: bool,
    bottom_row: bool,
    log: bool,
}

#[allow(clippy::too_many_arguments)]
fn draw_panel<Y>(
    area: &DrawingArea<Png<'_>, Shift>,
    plot: &LoadLatencyPlot,
    panel: &LoadPanel,
    (x_range, y_range): (std::ops::Range<f64>, Y),
    frame: Frame,
    sizes: TextSizes,
    path: &Path,
    probes: &[(usize, f64, f64)],
) -> Result<Vec<ProbePixel>, PlotError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let (width_px, _) = area.dim_in_pixel();
    let caption = elide(&panel.label, width_px as usize - 20, sizes.tick);
    let mut chart = ChartBuilder::on(area)
        .margin(8)
        .caption(caption, (FONT, sizes.tick))
        .x_label_area_size(if frame.bottom_row {
            sizes.label * 3
        } else {
            sizes.tick * 2
        })
        .y_label_area_size(if frame.left_column {
            sizes.label * 4
        } else {
            sizes.tick * 3
        })
        .build_cartesian_2d(x_range, y_range)
        .at(path)?;
    let y_desc = format!(
        "{} latency (ms{})",
        plot.metric,
        if frame.log { ", log scale" } else { "" }
    );
    let mut mesh = chart.configure_mesh();
    mesh.axis_desc_style((FONT, sizes.label))
        .label_style((FONT, sizes.tick))
        .x_label_formatter(&|v| compact(*v))
        .y_label_formatter(&|v| compact(*v))
        .x_labels(6)
        .y_labels(8)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.10));
    if frame.bottom_row {
        mesh.x_desc("offered load (req/s)");
    }
    if frame.left_column {
        mesh.y_desc(y_desc);
    }
    mesh.draw().at(path)?;

    draw_capacity_and_slo(&mut chart, plot, panel, path)?;
    // The capacity's label and the whiskers first, so the percentile lines sit on top of them.
    if let Some(capacity) = &panel.capacity {
        draw_capacity_label(&chart, area, capacity, plot.slo_ms, sizes, path)?;
    }
    let departed: Vec<&LoadPoint> = panel
        .points
        .iter()
        .filter(|p| p.achieved_rps < p.offered_rps * (1.0 - DEPARTURE_FRACTION))
        .collect();
    draw_whiskers(&mut chart, &departed, path)?;
    draw_percentiles(&mut chart, panel, path)?;
    draw_capacity_point(&mut chart, panel, path)?;
    if let Some(last) = departed.last() {
        draw_departure_note(&chart, area, last, sizes, path)?;
    }
    Ok(probes
        .iter()
        .map(|&(i, x, y)| (i, chart.backend_coord(&(x, y))))
        .collect())
}

/// A panel's chart: load (req/s) across, latency (ms) up, on a linear or a log axis.
type PanelChart<'a, 'b, Y> =
    ChartContext<'a, Png<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

/// The capacity's 95% interval band and line (when there is a capacity) and the SLO's dashed
/// line (when there is an SLO).
fn draw_capacity_and_slo<Y>(
    chart: &mut PanelChart<'_, '_, Y>,
    plot: &LoadLatencyPlot,
    panel: &LoadPanel,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    let x_end = chart.x_range().end;
    let (y_bottom, y_top) = (chart.y_range().start, chart.y_range().end);
    if let Some(capacity) = &panel.capacity
        && capacity.rps > 0.0
    {
        if capacity.high_rps > capacity.low_rps {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(capacity.low_rps, y_bottom), (capacity.high_rps, y_top)],
                    CAPACITY_COLOUR.mix(0.18).filled(),
                )))
                .at(path)?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(capacity.rps, y_bottom), (capacity.rps, y_top)],
                CAPACITY_COLOUR.stroke_width(2),
            )))
            .at(path)?;
    }
    if let Some(slo_ms) = plot.slo_ms {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, slo_ms), (x_end, slo_ms)],
                12,
                6,
                SLO_COLOUR.stroke_width(2),
            ))
            .at(path)?;
    }
    Ok(())
}

/// A whisker from each `departed` point's p99 left to its achieved rate, with a tick there.
fn draw_whiskers<Y>(
    chart: &mut PanelChart<'_, '_, Y>,
    departed: &[&LoadPoint],
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    for point in departed {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![
                    (point.achieved_rps, point.p99_ms),
                    (point.offered_rps, point.p99_ms),
                ],
                ACHIEVED_COLOUR.stroke_width(2),
            )))
            .at(path)?;
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((point.achieved_rps, point.p99_ms))
                    + PathElement::new(vec![(0, -5), (0, 5)], ACHIEVED_COLOUR.stroke_width(2)),
            ))
            .at(path)?;
    }
    Ok(())
}

/// The p50, p95 and p99 lines against offered load, with a dot at each point.
fn draw_percentiles<Y>(
    chart: &mut PanelChart<'_, '_, Y>,
    panel: &LoadPanel,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    for (pick, colour, width) in [
        (
            (|p: &LoadPoint| p.p50_ms) as fn(&LoadPoint) -> f64,
            P50_COLOUR,
            2,
        ),
        (|p: &LoadPoint| p.p95_ms, P95_COLOUR, 2),
        (|p: &LoadPoint| p.p99_ms, P99_COLOUR, 3),
    ] {
        let line: Vec<(f64, f64)> = panel
            .points
            .iter()
            .map(|p| (p.offered_rps, pick(p)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), colour.stroke_width(width)))
            .at(path)?;
        chart
            .draw_series(
                line.into_iter()
                    .map(|point| Circle::new(point, width + 1, colour.filled())),
            )
            .at(path)?;
    }
    Ok(())
}

/// The capacity search's own run at capacity, on top: the point the capacity rests on (when
/// the panel has a capacity with a latency).
fn draw_capacity_point<Y>(
    chart: &mut PanelChart<'_, '_, Y>,
    panel: &LoadPanel,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    if let Some(capacity) = &panel.capacity
        && capacity.rps > 0.0
        && let Some(latency) = capacity.latency_ms
    {
        chart
            .draw_series(std::iter::once(Circle::new(
                (capacity.rps, latency),
                6,
                WHITE.filled(),
            )))
            .at(path)?;
        chart
            .draw_series(std::iter::once(Circle::new(
                (capacity.rps, latency),
                4,
                CAPACITY_COLOUR.filled(),
            )))
            .at(path)?;
    }
    Ok(())
}

/// The note of how far the last departed point's achieved rate fell behind its offered one,
/// bottom right, above the x axis: the curves climb away from that corner.
fn draw_departure_note<Y>(
    chart: &PanelChart<'_, '_, Y>,
    area: &DrawingArea<Png<'_>, Shift>,
    last: &LoadPoint,
    sizes: TextSizes,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    let x_end = chart.x_range().end;
    let y_bottom = chart.y_range().start;
    let text = format!(
        "achieved {} of {} req/s offered",
        number(last.achieved_rps),
        number(last.offered_rps)
    );
    let style = TextStyle::from((FONT, sizes.tick))
        .color(&RGBColor(90, 90, 90))
        .pos(Pos::new(HPos::Right, VPos::Bottom));
    let (x, y) = chart.backend_coord(&(x_end, y_bottom));
    let (base_x, base_y) = area.get_base_pixel();
    area.draw_text(&text, &style, (x - base_x - 6, y - base_y - 6))
        .at(path)?;
    Ok(())
}

/// Writes the capacity's number and interval just under `anchor_y` (the SLO; the top of the
/// panel without one), beside its line (to the right when the line is in the left half, else
/// to the left), on a white box.
fn draw_capacity_label<Y>(
    chart: &ChartContext<'_, Png<'_>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    area: &DrawingArea<Png<'_>, Shift>,
    capacity: &CapacityMark,
    anchor_y: Option<f64>,
    sizes: TextSizes,
    path: &Path,
) -> Result<(), PlotError>
where
    Y: Ranged<ValueType = f64>,
{
    let (x_start, x_end) = (chart.x_range().start, chart.x_range().end);
    let y_top = chart.y_range().end;
    let lines = capacity.label_lines();
    let text_px = sizes.tick;
    let width = lines
        .iter()
        .map(|l| area.estimate_text_size(l, &TextStyle::from((FONT, text_px))))
        .filter_map(Result::ok)
        .map(|(w, _)| w as i32)
        .max()
        .unwrap_or(0);
    let x_data = capacity.rps.clamp(x_start, x_end);
    let (line_x, top_y) = chart.backend_coord(&(x_data, y_top));
    let (base_x, base_y) = area.get_base_pixel();
    let right_side = capacity.rps <= 0.0 || x_data < (x_start + x_end) / 2.0;
    // Kept inside the chart: a long `ends:` line left of a line near the middle would otherwise
    // run past the panel's left edge.
    let chart_left = chart.backend_coord(&(x_start, y_top)).0;
    let left = if right_side {
        line_x + 6
    } else {
        (line_x - 6 - width).max(chart_left + 4)
    } - base_x;
    // Just under the SLO line: right of the capacity, the curves have mostly crossed above it.
    let top = anchor_y.map_or(top_y, |y| chart.backend_coord(&(x_data, y)).1) + 4 - base_y;
    let height = lines.len() as i32 * (text_px as i32 + 2);
    area.draw(&Rectangle::new(
        [(left - 3, top - 1), (left + width + 3, top + height)],
        WHITE.mix(0.85).filled(),
    ))
    .at(path)?;
    let style = TextStyle::from((FONT, text_px)).color(&CAPACITY_COLOUR);
    for (row, line) in lines.iter().enumerate() {
        area.draw_text(
            line,
            &style,
            (left, top + row as i32 * (text_px as i32 + 2)),
        )
        .at(path)?;
    }
    Ok(())
}

/// The figure's one legend, in a row under the title.
fn draw_key(
    area: &DrawingArea<Png<'_>, Shift>,
    plot: &LoadLatencyPlot,
    text_px: u32,
    path: &Path,
) -> Result<(), PlotError> {
    let style = TextStyle::from((FONT, text_px)).color(&BLACK);
    let (width, height) = area.dim_in_pixel();
    let y = height as i32 / 2;
    let entries: Vec<(String, RGBColor, u32, bool)> = [
        ("p50".to_string(), P50_COLOUR, 2, false),
        ("p95".to_string(), P95_COLOUR, 2, false),
        ("p99".to_string(), P99_COLOUR, 3, false),
    ]
    .into_iter()
    .chain(
        plot.slo_ms
            .map(|_| (plot.slo_label.clone(), SLO_COLOUR, 2, true)),
    )
    .chain([
        (
            "capacity (band: 95% interval; dot: its search's run)".to_string(),
            CAPACITY_COLOUR,
            2,
            false,
        ),
        (
            "achieved < offered load".to_string(),
            ACHIEVED_COLOUR,
            2,
            false,
        ),
    ])
    .collect();
    let swatch = 2 * text_px as i32;
    let widths: Vec<i32> = entries
        .iter()
        .map(|e| {
            area.estimate_text_size(&e.0, &TextStyle::from((FONT, text_px)))
                .map_or(0, |(w, _)| w as i32)
        })
        .collect();
    let total: i32 = widths.iter().map(|w| w + swatch + 8 + 24).sum();
    let mut x = ((width as i32 - total) / 2).max(8);
    for (entry, text_width) in entries.iter().zip(&widths) {
        let (label, colour, stroke, dashed) = entry;
        if *dashed {
            for s in [0, 2] {
                area.draw(&PathElement::new(
                    vec![(x + s * swatch / 3, y), (x + (s + 1) * swatch / 3, y)],
                    colour.stroke_width(*stroke),
                ))
                .at(path)?;
            }
        } else {
            area.draw(&PathElement::new(
                vec![(x, y), (x + swatch, y)],
                colour.stroke_width(*stroke),
            ))
            .at(path)?;
        }
        area.draw_text(label, &style, (x + swatch + 8, y - text_px as i32 / 2))
            .at(path)?;
        x += swatch + 8 + text_width + 24;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::test_support::{Image, png_size};

    /// Three configurations with the knee at 100, 200 and 300 req/s; the last saturates.
    pub(crate) fn sample(slo_ms: f64) -> LoadLatencyPlot {
        let panels = (1..=3)
            .map(|c| {
                let knee = 100.0 * f64::from(c);
                let points = (1..=8)
                    .map(|i| {
                        let offered = 40.0 * f64::from(i);
                        let rho = (offered / knee).min(0.9);
                        // Past the knee the queue keeps growing with the offered load.
                        let wait = 10.0 * rho / (1.0 - rho) * (offered / knee).max(1.0);
                        LoadPoint {
                            offered_rps: offered,
                            achieved_rps: offered.min(knee),
                            p50_ms: 10.0 + wait,
                            p95_ms: 10.0 + 2.0 * wait,
                            p99_ms: 10.0 + 3.0 * wait,
                        }
                    })
                    .collect();
                LoadPanel {
                    label: format!("instances={c}"),
                    points,
                    capacity: Some(CapacityMark {
                        rps: 0.8 * knee,
                        low_rps: 0.75 * knee,
                        high_rps: 0.85 * knee,
                        seeds: 3,
                        lower_bound: false,
                        limited_by: vec![Limit::Slo],
                        latency_ms: None,
                    }),
                }
            })
            .collect();
        LoadLatencyPlot {
            title: "e2e latency vs offered load".into(),
            metric: "e2e".into(),
            panels,
            slo_ms: Some(slo_ms),
            slo_label: format!("SLO e2e.p99<={slo_ms}ms"),
            note: "Top 3 of 5 configurations by capacity per instance; 2 left out.".into(),
        }
    }

    #[test]
    fn load_latency_renders_png_of_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("load_latency.png");
        draw_load_latency(&sample(100.0), PlotSize::DEFAULT, &path).unwrap();
        assert_eq!(png_size(&path), (1200, 800));
    }

    #[test]
    fn percentiles_are_drawn_at_their_data_in_their_colours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("percentiles.png");
        let plot = sample(100.0);
        // Probe the middle of a segment of each percentile line in the second panel.
        let (a, b) = (plot.panels[1].points[1], plot.panels[1].points[2]);
        let mid = |pick: fn(&LoadPoint) -> f64| {
            (
                1,
                (a.offered_rps + b.offered_rps) / 2.0,
                (pick(&a) + pick(&b)) / 2.0,
            )
        };
        let probes = [
            mid(|p| p.p50_ms),
            mid(|p| p.p95_ms),
            mid(|p| p.p99_ms),
            (1, plot.panels[1].capacity.as_ref().unwrap().rps, 12.0),
        ];
        let pixels = draw_load_latency_mapped(&plot, PlotSize::DEFAULT, &path, &probes).unwrap();
        let image = Image::read(&path);
        for ((probe, colour), name) in pixels
            .iter()
            .zip([P50_COLOUR, P95_COLOUR, P99_COLOUR, CAPACITY_COLOUR])
            .zip(["p50", "p95", "p99", "capacity"])
        {
            assert!(
                image.has_colour_near(*probe, colour, 3),
                "{name} is not drawn at pixel {probe:?} where its data maps"
            );
        }
        // And a p99 colour is not where p50's data is (the lines are apart here).
        assert!(!image.has_colour_near(pixels[0], P99_COLOUR, 1));
    }

    #[test]
    fn slo_line_sits_on_the_row_its_value_maps_to_and_moves_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = Vec::new();
        for slo in [60.0, 120.0] {
            let path = dir.path().join(format!("slo_{slo}.png"));
            let plot = sample(slo);
            // Probe x in the first panel, between the axis and the capacity label's column.
            let probes = [(0, 20.0, slo)];
            let pixels =
                draw_load_latency_mapped(&plot, PlotSize::DEFAULT, &path, &probes).unwrap();
            let (x, y) = pixels[0];
            let image = Image::read(&path);
            let row = (y - 3..=y + 3)
                .find(|&r| image.colour_at(x, r) == SLO_COLOUR)
                .unwrap_or_else(|| panic!("no SLO colour in column {x} near row {y} (slo {slo})"));
            rows.push(row);
        }
        assert!(
            rows[1] < rows[0],
            "a higher SLO must be drawn higher up: rows {rows:?}"
        );
    }

    #[test]
    fn saturated_points_get_an_achieved_whisker_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("whisker.png");
        let plot = sample(100.0);
        // Panel 0 saturates at 100 req/s: at offered 320 the whisker runs from 100 to 320.
        let last = plot.panels[0].points[7];
        let first = plot.panels[0].points[0];
        let probes = [
            // Right of the capacity label, which sits over the top left of the panel.
            (0, 290.0, last.p99_ms),
            // Panel 2 never falls behind: no whisker left of its first point.
            (2, first.offered_rps / 2.0, plot.panels[2].points[0].p99_ms),
        ];
        let pixels = draw_load_latency_mapped(&plot, PlotSize::DEFAULT, &path, &probes).unwrap();
        let image = Image::read(&path);
        assert!(image.has_colour_near(pixels[0], ACHIEVED_COLOUR, 2));
        assert!(!image.has_colour_near(pixels[1], ACHIEVED_COLOUR, 2));
    }

    #[test]
    fn different_data_give_different_images() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one.png"), dir.path().join("two.png"));
        let plot = sample(100.0);
        draw_load_latency(&plot, PlotSize::DEFAULT, &one).unwrap();
        let mut other = plot.clone();
        other.panels[0].points[3].p99_ms *= 1.5;
        draw_load_latency(&other, PlotSize::DEFAULT, &two).unwrap();
        assert_ne!(Image::read(&one).pixels, Image::read(&two).pixels);
    }

    #[test]
    fn empty_or_bad_panels_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let mut plot = sample(100.0);
        plot.panels.iter_mut().for_each(|p| p.points.clear());
        assert!(matches!(
            draw_load_latency(&plot, PlotSize::DEFAULT, &path),
            Err(PlotError::BadData { .. })
        ));
        let mut plot = sample(100.0);
        plot.panels[1].points[2].achieved_rps = f64::NAN;
        let err = draw_load_latency(&plot, PlotSize::DEFAULT, &path).unwrap_err();
        assert!(err.to_string().contains("instances=2"), "{err}");
    }

    #[test]
    fn capacity_label_says_number_and_interval() {
        let mark = CapacityMark {
            rps: 27.04,
            low_rps: 26.1,
            high_rps: 27.9,
            seeds: 3,
            lower_bound: false,
            limited_by: Vec::new(),
            latency_ms: None,
        };
        assert_eq!(
            mark.label_lines(),
            [
                "capacity 27.0 req/s".to_string(),
                "95% CI 26.1–27.9, 3 seeds".to_string()
            ]
        );
        let one = CapacityMark {
            seeds: 1,
            lower_bound: true,
            rps: 613.5,
            ..mark
        };
        assert_eq!(one.label_lines()[0], "capacity ≥ 614 req/s");
        assert_eq!(one.label_lines()[1], "1 seed: no interval");
    }

    #[test]
    fn capacity_label_says_what_ends_the_curve() {
        let mark = CapacityMark {
            rps: 1862.0,
            low_rps: 1609.0,
            high_rps: 2256.0,
            seeds: 3,
            lower_bound: false,
            limited_by: vec![Limit::QueueGrowth, Limit::AchievedBelowOffered],
            latency_ms: Some(46.5),
        };
        assert_eq!(
            mark.label_lines().last().map(String::as_str),
            Some("ends: queue grows, achieved < offered")
        );
        let slo = CapacityMark {
            limited_by: vec![Limit::Slo, Limit::Losses],
            ..mark
        };
        assert_eq!(slo.label_lines()[2], "ends: SLO crossed, losses");
    }

    #[test]
    fn the_search_run_at_capacity_is_drawn_as_a_dot_where_its_data_maps() {
        let dir = tempfile::tempdir().unwrap();
        let mut plot = sample(100.0);
        let capacity = plot.panels[2].capacity.as_mut().unwrap();
        capacity.latency_ms = Some(70.0);
        let at = (2, capacity.rps, 70.0);
        let green_width = |plot: &LoadLatencyPlot, name: &str| {
            let path = dir.path().join(name);
            let pixels = draw_load_latency_mapped(plot, PlotSize::DEFAULT, &path, &[at]).unwrap();
            let (x, y) = pixels[0];
            Image::read(&path)
                .columns_of(y, CAPACITY_COLOUR)
                .into_iter()
                .filter(|c| (c - x).abs() <= 8)
                .count()
        };
        let with_dot = green_width(&plot, "dot.png");
        plot.panels[2].capacity.as_mut().unwrap().latency_ms = None;
        let line_only = green_width(&plot, "line.png");
        assert!(
            with_dot >= 6 && line_only <= 3,
            "green columns at the dot's row: {with_dot} with the dot, {line_only} without"
        );
    }
}
