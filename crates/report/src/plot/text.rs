//! The PNG backend every plot draws on: plotters' bitmap backend, with text drawn here.
//!
//! Two things spaced digits out ("achieved 1 91 8 of 31 92 req/s"): Noto Sans sets figures
//! tabular (every digit as wide as `0`, so a narrow `1` stands in a wide gap), and plotters
//! 0.3.7's `ab_glyph` renderer drops each glyph's left side bearing. [`Png`] draws text itself:
//! each outline where the font places it, and digits proportionally (each digit as wide as its
//! ink plus the side bearings of `0`), measuring text the same way, so anchoring and layout
//! agree with what is drawn. Everything else goes to the bitmap backend.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, ScaleFont, point};
use plotters::backend::BitMapBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// The embedded font, parsed once.
fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(ttf_noto_sans::REGULAR).ok())
        .as_ref()
}

/// One pixel of a text's ink: its offset from the text's origin (the pen's start, `size / 2`
/// above the baseline, as plotters places it) and its coverage in [0, 1].
pub(crate) type InkPixel = (i32, i32, f32);

/// Where one glyph goes: the pen advance after it, and how far right of the pen its outline's
/// origin sits.
fn placement(font: &ab_glyph::PxScaleFont<&FontRef<'static>>, c: char) -> (f32, f32) {
    let id = font.glyph_id(c);
    if !c.is_ascii_digit() {
        return (font.h_advance(id), 0.0);
    }
    let zero = font.glyph_id('0');
    let side = (font.h_advance(zero) - ink_width(font, zero)) / 2.0;
    let width = ink_width(font, id);
    let left = font
        .outline_glyph(id.with_scale(font.scale()))
        .map_or(0.0, |outline| outline.px_bounds().min.x);
    (width + 2.0 * side, side - left)
}

/// The width of a glyph's outline, pixels (0 for a glyph with no outline).
fn ink_width(font: &ab_glyph::PxScaleFont<&FontRef<'static>>, id: ab_glyph::GlyphId) -> f32 {
    font.outline_glyph(id.with_scale(font.scale()))
        .map_or(0.0, |outline| outline.px_bounds().width())
}

/// The width of `text` at `size_px` as [`ink`] lays it out, pixels; `None` when the embedded
/// font cannot be read.
pub(crate) fn width(text: &str, size_px: f64) -> Option<f32> {
    let font = font()?.as_scaled(size_px as f32);
    let mut pen_x = 0.0f32;
    let mut previous = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(previous) = previous {
            pen_x += font.kern(previous, id);
        }
        previous = Some(id);
        pen_x += placement(&font, c).0;
    }
    Some(pen_x)
}

/// The ink of `text` at `size_px`: each glyph's outline placed at the pen position plus its
/// own bearing, digits set proportionally, kerning applied. `None` when the embedded font
/// cannot be read.
pub(crate) fn ink(text: &str, size_px: f64) -> Option<Vec<InkPixel>> {
    let font = font()?.as_scaled(size_px as f32);
    let mut pixels = Vec::new();
    let mut pen_x = 0.0f32;
    let mut previous = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(previous) = previous {
            pen_x += font.kern(previous, id);
        }
        previous = Some(id);
        let (advance, offset) = placement(&font, c);
        let at = point(pen_x + offset, size_px as f32 / 2.0);
        if let Some(outline) = font.outline_glyph(id.with_scale_and_position(font.scale(), at)) {
            let bounds = outline.px_bounds();
            let (left, top) = (bounds.min.x as i32, bounds.min.y as i32);
            outline.draw(|x, y, coverage| {
                pixels.push((left + x as i32, top + y as i32, coverage));
            });
        }
        pen_x += advance;
    }
    Some(pixels)
}

/// The bitmap backend with text drawn by [`ink`].
pub struct Png<'a>(pub(crate) BitMapBackend<'a>);

type Drawn<'a> = Result<(), DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>>;

impl<'a> DrawingBackend for Png<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Drawn<'a> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Drawn<'a> {
        self.0.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Drawn<'a> {
        self.0.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Drawn<'a> {
        self.0.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Drawn<'a> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Drawn<'a> {
        self.0.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Drawn<'a> {
        self.0.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Drawn<'a> {
        self.0.fill_polygon(vert, style)
    }

    fn blit_bitmap(&mut self, pos: BackendCoord, size: (u32, u32), src: &[u8]) -> Drawn<'a> {
        self.0.blit_bitmap(pos, size, src)
    }

    /// The size of `text` as [`Png::draw_text`] draws it: [`width`] wide, as tall as plotters
    /// says.
    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let w = width(text, style.size()).map_or(max_x - min_x, |w| w as i32);
        Ok((w.max(0) as u32, (max_y - min_y).max(0) as u32))
    }

    /// Draws `text` from [`ink`], anchored and rotated as plotters would.
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Drawn<'a> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let Some(pixels) = ink(text, style.size()) else {
            return self.0.draw_text(text, style, pos);
        };
        let ((min_x, min_y), (_, max_y)) = style
            .layout_box(text)
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let width = width(text, style.size()).unwrap_or_default() as i32;
        let height = max_y - min_y;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Center => -width / 2,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let (canvas_w, canvas_h) = self.get_size();
        for (x, y, coverage) in pixels {
            let (x, y) = transform.transform(x + dx - min_x, y + dy - min_y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if x >= 0 && y >= 0 && x < canvas_w as i32 && y < canvas_h as i32 {
                let shade = BackendColor {
                    alpha: color.alpha * f64::from(coverage.clamp(0.0, 1.0)),
                    rgb: color.rgb,
                };
                self.0.draw_pixel((x, y), shade)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use plotters::prelude::*;

    use super::*;

    /// Draws `text` in black at 40 px through plotters onto a white canvas with [`Png`], and
    /// returns the runs of columns that hold dark ink, left to right, as `(first, last)`.
    fn drawn_glyph_columns(text: &str) -> Vec<(i32, i32)> {
        super::super::ensure_font().unwrap();
        let (w, h) = (240u32, 80u32);
        let mut buffer = vec![0u8; (w * h * 3) as usize];
        {
            let root = Png(BitMapBackend::with_buffer(&mut buffer, (w, h))).into_drawing_area();
            root.fill(&WHITE).unwrap();
            let style = TextStyle::from((super::super::FONT, 40)).color(&BLACK);
            root.draw_text(text, &style, (10, 10)).unwrap();
            root.present().unwrap();
        }
        let dark = |x: u32| (0..h).any(|y| buffer[((y * w + x) * 3) as usize] < 100);
        let mut runs: Vec<(i32, i32)> = Vec::new();
        for x in (0..w).filter(|&x| dark(x)) {
            let x = x as i32;
            match runs.last_mut() {
                Some((_, last)) if x == *last + 1 => *last = x,
                _ => runs.push((x, x)),
            }
        }
        runs
    }

    #[test]
    fn digits_are_evenly_spaced_so_none_reads_apart() {
        // With tabular figures and plotters' renderer, "1918" drew with ink gaps of 10, 5 and
        // 11 px at 40 px: it read "1 91 8".
        let runs = drawn_glyph_columns("1918");
        assert_eq!(runs.len(), 4, "separate glyphs: {runs:?}");
        let gaps: Vec<i32> = runs.windows(2).map(|w| w[1].0 - w[0].1).collect();
        let (least, most) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
        assert!(
            most - least <= 1,
            "ink gaps {gaps:?} px differ by more than 1: {runs:?}"
        );
    }

    #[test]
    fn measured_width_matches_the_drawn_ink() {
        let runs = drawn_glyph_columns("31.92");
        let drawn = (runs.last().unwrap().1 - runs[0].0) as f32;
        let measured = width("31.92", 40.0).unwrap();
        assert!(
            (measured - drawn).abs() <= 6.0,
            "measured {measured} px, ink spans {drawn} px"
        );
    }

    #[test]
    fn a_glyph_starts_at_its_left_side_bearing() {
        let font = font().unwrap().as_scaled(40.0);
        let bearing = font.h_side_bearing(font.glyph_id('1'));
        let first = ink("1", 40.0)
            .unwrap()
            .iter()
            .filter(|(_, _, c)| *c > 0.3)
            .map(|(x, _, _)| *x)
            .min()
            .unwrap();
        assert!(
            (first as f32 - bearing).abs() <= 1.0,
            "ink of `1` starts at {first} px, its bearing is {bearing} px"
        );
    }
}
