//! PNG plots of sweep results, drawn with plotters and an embedded font (Noto Sans), so no
//! system fonts are needed.
//!
//! Each plot takes a plain data struct, not simulator types, so it can be drawn and tested on
//! its own. Every function writes a PNG of the requested [`PlotSize`] to a path ending in `.png`.

mod breakdown;
mod by_config;
mod cdf;
mod heatmap;
mod load_latency;
mod profile_fit;
mod text;
mod timeseries;

pub use breakdown::{StageBars, StageBreakdownPlot, draw_stage_breakdown};
pub use by_config::{ConfigLine, LatencyByConfigPlot, draw_latency_by_config};
pub use cdf::{CdfPlot, CdfSeries, draw_latency_cdf};
pub use heatmap::{CapacityHeatmap, draw_capacity_heatmap};
pub use load_latency::{
    ACHIEVED_COLOUR, CAPACITY_COLOUR, CapacityMark, LoadLatencyPlot, LoadPanel, LoadPoint,
    P50_COLOUR, P95_COLOUR, P99_COLOUR, SLO_COLOUR, draw_load_latency,
};
pub use profile_fit::{FitSeries, MeasuredPoint, ProfileFitPlot, draw_profile_fit};
pub(crate) use text::Png;
pub use timeseries::{TimeSeriesPanel, TimeSeriesPlot, draw_time_series};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// The family name the embedded font is registered under.
const FONT: &str = "sans-serif";

/// Pixel size of a plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlotSize {
    /// Width in pixels (at least 200).
    pub width_px: u32,
    /// Height in pixels (at least 150).
    pub height_px: u32,
}

impl PlotSize {
    /// 1200 × 800, readable at review size.
    pub const DEFAULT: PlotSize = PlotSize {
        width_px: 1200,
        height_px: 800,
    };

    /// Refuses a size outside 200 × 150 to 10000 × 10000 pixels, saying so.
    pub fn check(self) -> Result<(), String> {
        let ok =
            (200..=10_000).contains(&self.width_px) && (150..=10_000).contains(&self.height_px);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "size {}x{} px is outside 200x150 to 10000x10000",
                self.width_px, self.height_px
            ))
        }
    }
}

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The data cannot be plotted (empty, not finite, mismatched lengths).
    #[error("plot {path}: {reason}")]
    BadData {
        /// The PNG that was to be drawn.
        path: PathBuf,
        /// What is wrong with the data.
        reason: String,
    },
    /// The embedded font was refused by the font table.
    #[error("plot: the embedded font could not be registered")]
    Font,
    /// Drawing or encoding the PNG failed (e.g. the folder does not exist).
    #[error("plot {path}: {reason}")]
    Draw {
        /// The PNG being drawn.
        path: PathBuf,
        /// The plotting library's message.
        reason: String,
    },
}

fn bad_data(path: &Path, reason: impl Into<String>) -> PlotError {
    PlotError::BadData {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn draw_error(path: &Path) -> impl Fn(Box<dyn std::fmt::Display>) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Maps any plotters error to [`PlotError::Draw`] for `path`.
trait DrawResult<T> {
    fn at(self, path: &Path) -> Result<T, PlotError>;
}

impl<T, E: std::fmt::Display + 'static> DrawResult<T> for Result<T, E> {
    fn at(self, path: &Path) -> Result<T, PlotError> {
        self.map_err(|e| draw_error(path)(Box::new(e)))
    }
}

/// Registers the embedded font once per process.
fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, ttf_noto_sans::REGULAR).is_ok()
    });
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// Opens a white canvas of `size` that writes to `path` (which must end in `.png`).
fn canvas(path: &Path, size: PlotSize) -> Result<DrawingArea<Png<'_>, Shift>, PlotError> {
    ensure_font()?;
    if path.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(bad_data(path, "the file name must end in .png"));
    }
    size.check().map_err(|reason| bad_data(path, reason))?;
    let root = Png(BitMapBackend::new(path, (size.width_px, size.height_px))).into_drawing_area();
    root.fill(&WHITE).at(path)?;
    Ok(root)
}

/// Text sizes scaled to the canvas so labels stay readable at any size.
#[derive(Debug, Clone, Copy)]
struct TextSizes {
    title: u32,
    label: u32,
    tick: u32,
}

impl TextSizes {
    fn for_size(size: PlotSize) -> TextSizes {
        let scale = (size.width_px.min(size.height_px * 3 / 2) as f64 / 1200.0).clamp(0.5, 3.0);
        let px = |base: f64| (base * scale).round().max(10.0) as u32;
        TextSizes {
            title: px(30.0),
            label: px(20.0),
            tick: px(16.0),
        }
    }
}

/// Distinct colours for configurations (Tableau 10), cycled.
const SERIES_COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn series_colour(index: usize) -> RGBColor {
    SERIES_COLOURS[index % SERIES_COLOURS.len()]
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy)]
enum LegendMark {
    /// A line of this width.
    Line(u32),
    /// A dashed line of this width.
    Dashed(u32),
    /// A filled box.
    Box,
    /// A hollow square marker.
    Square,
    /// A cross marker.
    Cross,
}

/// One row of a legend.
struct LegendEntry {
    label: String,
    colour: RGBColor,
    mark: LegendMark,
}

/// One legend row per series, each a line in the series' colour (in [`series_colour`] order).
fn series_legend<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<LegendEntry> {
    labels
        .enumerate()
        .map(|(i, label)| LegendEntry {
            label: label.to_string(),
            colour: series_colour(i),
            mark: LegendMark::Line(3),
        })
        .collect()
}

/// Draws a legend as rows in its own area (beside the chart, so it never hides data).
fn draw_legend(
    area: &DrawingArea<Png<'_>, Shift>,
    entries: &[LegendEntry],
    text_px: u32,
    path: &Path,
) -> Result<(), PlotError> {
    let row_px = (text_px as i32 * 3) / 2;
    let (width, height) = area.dim_in_pixel();
    let max_rows = (height as i32 / row_px).max(1) as usize;
    let style = TextStyle::from((FONT, text_px)).color(&BLACK);
    for (i, entry) in entries.iter().enumerate() {
        if i + 1 == max_rows && entries.len() > max_rows {
            let more = format!("… and {} more", entries.len() - i);
            area.draw_text(&more, &style, (8, i as i32 * row_px))
                .at(path)?;
            break;
        }
        let y = i as i32 * row_px + row_px / 2;
        let x0 = 8;
        let x1 = 8 + 3 * text_px as i32 / 2;
        let colour = entry.colour;
        match entry.mark {
            LegendMark::Line(w) => area
                .draw(&PathElement::new(
                    vec![(x0, y), (x1, y)],
                    colour.stroke_width(w),
                ))
                .at(path)?,
            LegendMark::Dashed(w) => {
                let segment = (x1 - x0) / 5;
                for s in [0, 2, 4] {
                    area.draw(&PathElement::new(
                        vec![(x0 + s * segment, y), (x0 + (s + 1) * segment, y)],
                        colour.stroke_width(w),
                    ))
                    .at(path)?;
                }
            }
            LegendMark::Box => area
                .draw(&Rectangle::new(
                    [(x0, y - text_px as i32 / 3), (x1, y + text_px as i32 / 3)],
                    colour.filled(),
                ))
                .at(path)?,
            LegendMark::Square => area
                .draw(&Rectangle::new(
                    [((x0 + x1) / 2 - 6, y - 6), ((x0 + x1) / 2 + 6, y + 6)],
                    colour.stroke_width(3),
                ))
                .at(path)?,
            LegendMark::Cross => area
                .draw(&Cross::new(((x0 + x1) / 2, y), 7, colour.stroke_width(3)))
                .at(path)?,
        }
        let label = elide(
            &entry.label,
            (width as usize).saturating_sub(x1 as usize + 16),
            text_px,
        );
        area.draw_text(&label, &style, (x1 + 8, y - text_px as i32 / 2))
            .at(path)?;
    }
    Ok(())
}

/// The label of category `value` on an axis whose categories sit at 0, 1, 2, ...: the label at
/// a whole-number tick, nothing between.
fn category_label(labels: &[String], value: f64) -> String {
    let nearest = value.round();
    if (value - nearest).abs() > 1e-6 || nearest < 0.0 {
        return String::new();
    }
    labels.get(nearest as usize).cloned().unwrap_or_default()
}

/// Width in pixels of a legend area wide enough for `labels` at `text_px`, within 18% to 40%
/// of the canvas width.
fn legend_width_px(labels: impl IntoIterator<Item = usize>, text_px: u32, canvas_px: u32) -> u32 {
    let longest = labels.into_iter().max().unwrap_or(0) as f64;
    let needed = longest * 0.62 * text_px as f64 + 4.0 * text_px as f64;
    let canvas = canvas_px as f64;
    needed.clamp(canvas * 0.18, canvas * 0.40) as u32
}

/// Shortens `text` to roughly fit `width_px` at `text_px` (Noto Sans averages ~0.55 em).
fn elide(text: &str, width_px: usize, text_px: u32) -> String {
    let fits = (width_px as f64 / (text_px as f64 * 0.55)).floor() as usize;
    if text.chars().count() <= fits || fits < 4 {
        return text.to_string();
    }
    let kept: String = text.chars().take(fits - 1).collect();
    format!("{kept}…")
}

/// Range `[lo, hi]` padded by 5% each side for a linear axis; a zero-width range is widened.
fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if hi <= lo {
        let pad = lo.abs().max(1.0) * 0.1;
        return (lo - pad, hi + pad);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

/// Whether positive values spanning `lo..hi` are wide enough to need a log axis.
fn wants_log(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo > 30.0
}

/// Range for a log axis: a little beyond the data, by a factor.
fn log_padded(lo: f64, hi: f64) -> (f64, f64) {
    (lo / 1.25, hi * 1.25)
}

/// Minimum and maximum of finite values, or `None` when there are none.
fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// Formats an axis value compactly: `0.5`, `12`, `1.5k`, `2M`.
fn compact(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if scaled.abs() >= 100.0 || scaled.fract().abs() < 1e-9 {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 {
        format!("{scaled:.1}")
    } else if scaled.abs() >= 0.1 {
        format!("{scaled:.2}")
    } else {
        format!("{scaled:.3}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}{suffix}")
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::Path;

    /// Reads a PNG's width and height from its IHDR chunk, checking the signature. With
    /// `CAPSIM_KEEP_PLOTS=DIR` set, also copies the PNG there for a person to look at.
    pub fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).expect("the PNG was written");
        if let Some(dir) = std::env::var_os("CAPSIM_KEEP_PLOTS") {
            let name = path.file_name().expect("a file name");
            std::fs::create_dir_all(&dir).expect("the keep folder can be made");
            std::fs::write(Path::new(&dir).join(name), &bytes).expect("the copy is written");
        }
        assert!(bytes.len() > 1000, "PNG is only {} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG signature");
        assert_eq!(&bytes[12..16], b"IHDR");
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        (width, height)
    }

    /// A decoded PNG, RGB(A) bytes row by row.
    pub struct Image {
        pub width: u32,
        pub height: u32,
        pub channels: usize,
        pub pixels: Vec<u8>,
    }

    impl Image {
        /// Decodes the PNG at `path` (and keeps a copy as [`png_size`] does).
        pub fn read(path: &Path) -> Image {
            png_size(path);
            let file = std::fs::File::open(path).expect("the PNG was written");
            let mut reader = png::Decoder::new(std::io::BufReader::new(file))
                .read_info()
                .expect("a readable PNG");
            let mut pixels = vec![0; reader.output_buffer_size()];
            let info = reader.next_frame(&mut pixels).expect("a PNG frame");
            pixels.truncate(info.buffer_size());
            Image {
                width: info.width,
                height: info.height,
                channels: info.color_type.samples(),
                pixels,
            }
        }

        /// The colour at column `x`, row `y` (white outside the image).
        pub fn colour_at(&self, x: i32, y: i32) -> plotters::style::RGBColor {
            if x < 0 || y < 0 || x >= self.width as i32 || y >= self.height as i32 {
                return plotters::style::RGBColor(255, 255, 255);
            }
            let at = (y as usize * self.width as usize + x as usize) * self.channels;
            let p = &self.pixels[at..at + 3];
            plotters::style::RGBColor(p[0], p[1], p[2])
        }

        /// Whether `colour` (exactly) is within `radius` pixels of `at`.
        pub fn has_colour_near(
            &self,
            at: (i32, i32),
            colour: plotters::style::RGBColor,
            radius: i32,
        ) -> bool {
            (-radius..=radius).any(|dx| {
                (-radius..=radius).any(|dy| self.colour_at(at.0 + dx, at.1 + dy) == colour)
            })
        }

        /// Columns of row `y` whose colour is exactly `colour`.
        pub fn columns_of(&self, y: i32, colour: plotters::style::RGBColor) -> Vec<i32> {
            (0..self.width as i32)
                .filter(|&x| self.colour_at(x, y) == colour)
                .collect()
        }

        /// Rows of column `x` whose colour is exactly `colour`.
        pub fn rows_of(&self, x: i32, colour: plotters::style::RGBColor) -> Vec<i32> {
            (0..self.height as i32)
                .filter(|&y| self.colour_at(x, y) == colour)
                .collect()
        }

        /// Columns (sorted, once each) holding `colour` anywhere in the chart rows (excluding
        /// the top tenth, where titles and legends are).
        pub fn columns_of_colour(&self, colour: plotters::style::RGBColor) -> Vec<i32> {
            (0..self.width as i32)
                .filter(|&x| {
                    (self.height as i32 / 10..self.height as i32)
                        .any(|y| self.colour_at(x, y) == colour)
                })
                .collect()
        }
    }

    /// Fraction of pixels that are not white: a plot that drew its data has plenty.
    pub fn ink_fraction(path: &Path) -> f64 {
        let file = std::fs::File::open(path).expect("the PNG was written");
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .expect("a readable PNG");
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).expect("a PNG frame");
        let channels = info.color_type.samples();
        let pixels = &pixels[..info.buffer_size()];
        let inked = pixels
            .chunks(channels)
            .filter(|p| p.iter().take(3).any(|&c| c < 245))
            .count();
        inked as f64 / (pixels.len() / channels) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_numbers_read_naturally() {
        assert_eq!(compact(12.0), "12");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(compact(15_000.0), "15k");
        assert_eq!(compact(2_500_000.0), "2.5M");
        assert_eq!(compact(3.25), "3.25");
    }

    #[test]
    fn elide_keeps_short_text_and_cuts_long_text() {
        assert_eq!(elide("short", 500, 16), "short");
        let cut = elide(&"x".repeat(200), 100, 16);
        assert!(cut.ends_with('…') && cut.chars().count() < 20, "{cut}");
    }
}
