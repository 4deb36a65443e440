//! The PNG of one pattern over one transport: latency against size and
//! bandwidth against size, side by side, log-log, one curve per
//! implementation (the cache-line floor as a dashed horizontal line), and
//! under them what was skipped and why.
//!
//! Text is drawn with DejaVu Sans read from Debian's fonts-dejavu-core at
//! run time (plotters' ab_glyph backend: no fontconfig).

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::record::{Document, Record, Skip, SkipKind, implementation as imp};
use crate::sizes::ShortSize;
use crate::table::View;

/// Where the font is read from.
pub const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 720;
const TITLE: u32 = 50;

/// Why no plot was drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The font file could not be loaded.
    #[error("font {FONT}: {0} (bench/compare installs fonts-dejavu-core)")]
    Font(String),
    /// Nothing to draw.
    #[error("no figures to plot")]
    Empty,
    /// plotters failed.
    #[error("drawing: {0}")]
    Draw(String),
}

fn draw_error(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Registers DejaVu Sans as plotters' `sans-serif`, once.
fn load_font() -> Result<(), PlotError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT).map_err(|e| e.to_string())?;
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "not a usable TrueType font".to_owned())
        })
        .clone()
        .map_err(PlotError::Font)
}

/// A curve's color.
fn color(implementation: &str) -> RGBColor {
    match implementation {
        imp::NAVETTE => RGBColor(214, 39, 40),
        imp::OPENMPI => RGBColor(31, 119, 180),
        imp::MPICH => RGBColor(140, 86, 75),
        imp::UCX => RGBColor(44, 160, 44),
        imp::RAW_TCP => RGBColor(255, 127, 14),
        imp::MEMCPY | imp::CACHELINE | imp::PATTERN_FLOOR => RGBColor(110, 110, 110),
        _ => RGBColor(148, 103, 189),
    }
}

/// Draws `view` into `path`.
pub fn draw(
    path: &Path,
    view: &View<'_>,
    skipped: &[Skip],
    doc: &Document,
) -> Result<(), PlotError> {
    if view.sizes.is_empty() {
        return Err(PlotError::Empty);
    }
    load_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let (top, rest) = root.split_vertically(TITLE);
    let title = format!(
        "{} — navette {}, host {}, {}",
        view.title(),
        doc.navette_version,
        doc.host,
        doc.date
    );
    top.margin(14, 0, 0, 0)
        .titled(&title, ("sans-serif", 26))
        .map_err(draw_error)?;
    let mine: Vec<&Skip> = skipped.iter().filter(|s| view.concerns(s)).collect();
    let footer = 12 + 26 * mine.len() as u32;
    let (charts, bottom) = rest.split_vertically(HEIGHT - TITLE - footer);
    let (left, right) = charts.split_horizontally(WIDTH / 2);
    panel(&left, view, Metric::Latency)?;
    panel(&right, view, Metric::Bandwidth)?;
    for (i, skip) in mine.iter().enumerate() {
        let kind = match skip.kind {
            SkipKind::Unavailable => "not available",
            SkipKind::Failed => "failed",
        };
        let line = format!("{} skipped ({kind}): {}", skip.implementation, skip.reason);
        bottom
            .draw_text(
                &line,
                &("sans-serif", 18).into_font().color(&RGBColor(160, 0, 0)),
                (30, 26 * i as i32),
            )
            .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Metric {
    Latency,
    Bandwidth,
}

impl Metric {
    fn value(self, r: &Record) -> Option<f64> {
        match self {
            Self::Latency => r.latency_us,
            Self::Bandwidth => r.bandwidth_mbps,
        }
        .filter(|v| *v > 0.0 && v.is_finite())
    }
}

/// The x and y extents of a panel, padded for a log scale.
fn extents(view: &View<'_>, metric: Metric) -> Option<((f64, f64), (f64, f64))> {
    let xs = (view.sizes[0] as f64, *view.sizes.last()? as f64);
    let values: Vec<f64> = view
        .implementations
        .iter()
        .flat_map(|i| view.series(i))
        .filter_map(|r| metric.value(r))
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    (lo.is_finite() && hi > 0.0).then_some(((xs.0 / 1.5, xs.1 * 1.5), (lo / 2.0, hi * 2.0)))
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    view: &View<'_>,
    metric: Metric,
) -> Result<(), PlotError> {
    let Some(((x0, x1), (y0, y1))) = extents(view, metric) else {
        return Ok(());
    };
    let series = view.segments.is_some();
    let (caption, y_desc) = match metric {
        Metric::Latency if series => ("one-way time of a whole series", "µs (one-way)"),
        Metric::Latency => ("one-way latency", "µs (one-way)"),
        Metric::Bandwidth if series => ("bytes of a series / its one-way time", "MB/s (10^6 B/s)"),
        Metric::Bandwidth => ("bandwidth", "MB/s (10^6 B/s)"),
    };
    let x_desc = if series {
        "segment size (bytes)"
    } else {
        "message size (bytes)"
    };
    let keys: Vec<f64> = view.sizes.iter().map(|&s| s as f64).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (x0..x1).log_scale().with_key_points(keys),
            (y0..y1).log_scale(),
        )
        .map_err(draw_error)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| ShortSize(x.round() as usize).to_string())
        .y_label_formatter(&|y| short_number(*y))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()
        .map_err(draw_error)?;
    for &implementation in &view.implementations {
        let rows = view.series(implementation);
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.size as f64, metric.value(r)?)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let c = color(implementation);
        let width = if implementation == imp::NAVETTE { 3 } else { 2 };
        if implementation == imp::CACHELINE {
            let y = points[0].1;
            let label = format!("cacheline ({} B hand-off)", rows[0].size);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x0, y), (x1, y)],
                    8,
                    6,
                    c.stroke_width(2),
                ))
                .map_err(draw_error)?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                c.stroke_width(width),
            ))
            .map_err(draw_error)?
            .label(implementation)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(draw_error)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(draw_error)?;
    Ok(())
}

/// `0.05`, `3`, `120`, `4.5K`… for axis labels.
fn short_number(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}K", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let text = if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers() {
        assert_eq!(short_number(0.05), "0.05");
        assert_eq!(short_number(3.0), "3");
        assert_eq!(short_number(120.0), "120");
        assert_eq!(short_number(4500.0), "4.5K");
        assert_eq!(short_number(2_000_000.0), "2M");
    }
}
