//! The one plotting module: panels described as data ([`Panel`]) and drawn
//! to SVG with `plotters`. `mc-plot` (trace figures, [`trace`]; sweep
//! curves, [`sweep`]) and the result reports use it; nothing else writes
//! SVG.
//!
//! Only the SVG backend is built, with plotters' naive font metrics: no
//! system fonts and no font crates are needed on the machine, and the
//! browser (or SVG renderer) that opens the file draws the text.

pub mod fmt;
pub mod sweep;
pub mod trace;
pub mod web;

pub use fmt::Unit;

use plotters::coord::Shift;
use plotters::prelude::*;

/// A drawing failed inside plotters (never on input data).
#[derive(Debug, thiserror::Error)]
#[error("drawing the figure failed: {0}")]
pub struct PlotError(String);

fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// One named line (or cloud of points) of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Draw a dot per point instead of a line.
    pub dots: bool,
    pub style: Style,
}

/// How a series is drawn, when not by its position in the panel.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Style {
    /// Palette colour (default: the series' index), so the curves of one
    /// run share a colour across panels.
    pub color: Option<usize>,
    /// A dashed line (e.g. p99 next to a solid p50).
    pub dashed: bool,
}

/// What a panel shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Lines or point clouds over a shared x axis (series over time, CDFs).
    Lines(Vec<Series>),
    /// Bars: `counts[i]` values fell in `[edges[i], edges[i + 1])`.
    Histogram { edges: Vec<f64>, counts: Vec<u64> },
    /// One lane per session, a mark per turn at its time.
    Timeline(Vec<Vec<f64>>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// What the axes count: their numbers are written by [`fmt::human`].
    pub x_unit: Unit,
    pub y_unit: Unit,
    pub body: Body,
}

/// Equal-width bins over the range of `values` (`bins` ≥ 1).
pub fn histogram(values: &[f64], bins: usize) -> Body {
    let bins = bins.clamp(1, crate::limits::MAX_BINS);
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return Body::Histogram {
            edges: vec![0.0, 1.0],
            counts: vec![0],
        };
    }
    // A single value still gets a visible bar of width 1.
    let width = if hi > lo {
        (hi - lo) / bins as f64
    } else {
        1.0
    };
    let edges: Vec<f64> = (0..=bins).map(|i| lo + i as f64 * width).collect();
    let mut counts = vec![0u64; bins];
    for &v in values {
        // The top edge belongs to the last bin.
        let i = (((v - lo) / width) as usize).min(bins - 1);
        counts[i] += 1;
    }
    Body::Histogram { edges, counts }
}

/// The empirical CDF of `values`: (value, share of values ≤ it), one point
/// per distinct value.
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &x) in v.iter().enumerate() {
        let share = (i + 1) as f64 / n;
        match out.last_mut() {
            Some(last) if last.0 == x => last.1 = share,
            _ => out.push((x, share)),
        }
    }
    out
}

/// Draws one panel as a whole SVG document of `size` pixels.
pub fn panel_svg(panel: &Panel, size: (u32, u32)) -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root, panel)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Draws several panels as one SVG document, `cols` panels per row, each
/// `cell` pixels.
pub fn figure_svg(panels: &[Panel], cols: usize, cell: (u32, u32)) -> Result<String, PlotError> {
    let cols = cols.max(1);
    let rows = panels.len().div_ceil(cols).max(1);
    let size = (cell.0 * cols as u32, cell.1 * rows as u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let areas = root.split_evenly((rows, cols));
        for (area, panel) in areas.iter().zip(panels) {
            draw(area, panel)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The range a set of values spans, widened so that it is never empty.
fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.05)
}

fn color(i: usize) -> RGBAColor {
    Palette99::pick(i).mix(1.0)
}

/// The chart a panel is drawn on.
type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The panel's x and y ranges, from what it draws.
fn ranges(p: &Panel) -> ((f64, f64), (f64, f64)) {
    match &p.body {
        Body::Lines(series) => {
            let pts = || series.iter().flat_map(|s| s.points.iter());
            (
                span(pts().map(|p| p.0), false),
                span(pts().map(|p| p.1), true),
            )
        }
        Body::Histogram { edges, counts } => (
            span(edges.iter().copied(), false),
            span(counts.iter().map(|&c| c as f64), true),
        ),
        Body::Timeline(lanes) => (
            span(lanes.iter().flatten().copied(), false),
            (-0.5, lanes.len().max(1) as f64 - 0.5),
        ),
    }
}

fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &Panel) -> Result<(), PlotError> {
    let (xs, ys) = ranges(p);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)
        .map_err(err)?;
    // plotters picks about six ticks over each range: digits enough to
    // tell neighbours apart.
    let digits = |r: (f64, f64)| fmt::tick_digits(r.0.abs().max(r.1.abs()), (r.1 - r.0) / 6.0);
    let (xd, yd) = (digits(xs), digits(ys));
    let x_fmt = |v: &f64| fmt::human(*v, p.x_unit, xd);
    let y_fmt = |v: &f64| fmt::human(*v, p.y_unit, yd);
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(err)?;
    match &p.body {
        Body::Lines(series) => draw_lines(&mut chart, series)?,
        Body::Histogram { edges, counts } => {
            let c = color(0);
            chart
                .draw_series(
                    edges
                        .windows(2)
                        .zip(counts)
                        .map(|(e, &n)| Rectangle::new([(e[0], 0.0), (e[1], n as f64)], c.filled())),
                )
                .map_err(err)?;
        }
        Body::Timeline(lanes) => {
            for (lane, marks) in lanes.iter().enumerate() {
                let y = lane as f64;
                let c = color(lane);
                if let (Some(&a), Some(&b)) = (marks.first(), marks.last()) {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(a, y), (b, y)],
                            c.stroke_width(1),
                        )))
                        .map_err(err)?;
                }
                chart
                    .draw_series(marks.iter().map(|&x| Circle::new((x, y), 2, c.filled())))
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Lines, dashed lines or dot clouds, one a series, and their legend when
/// there are several.
fn draw_lines<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    series: &[Series],
) -> Result<(), PlotError> {
    for (i, s) in series.iter().enumerate() {
        let c = color(s.style.color.unwrap_or(i));
        if s.dots {
            // Half transparent: dense clouds show where they are dense.
            let d = c.mix(0.45);
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 2, d.filled())),
                )
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 3, d.filled()));
        } else if s.style.dashed {
            chart
                .draw_series(DashedLineSeries::new(
                    s.points.iter().copied(),
                    6,
                    4,
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2))
                });
        } else {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
    }
    if series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_by_hand() {
        // Range 0..10 in 5 bins of 2: [0,2) 0,1; [2,4) 3; [4,6) none;
        // [6,8) 7; [8,10] 9, 10 (the top edge belongs to the last bin).
        let Body::Histogram { edges, counts } = histogram(&[0.0, 1.0, 3.0, 7.0, 9.0, 10.0], 5)
        else {
            panic!("not a histogram")
        };
        assert_eq!(edges, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(counts, vec![2, 1, 0, 1, 2]);
    }

    #[test]
    fn cdf_steps_at_distinct_values() {
        assert_eq!(
            cdf(&[3.0, 1.0, 3.0, 2.0]),
            vec![(1.0, 0.25), (2.0, 0.5), (3.0, 1.0)]
        );
        assert!(cdf(&[]).is_empty());
    }

    fn panel(title: &str, body: Body) -> Panel {
        Panel {
            title: title.into(),
            x_label: "time".into(),
            y_label: "value".into(),
            x_unit: Unit::S,
            y_unit: Unit::Plain,
            body,
        }
    }

    #[test]
    fn figure_is_one_svg_with_every_panel_title_once() {
        let panels = vec![
            panel(
                "Requests per second",
                Body::Lines(vec![Series {
                    name: "req/s".into(),
                    points: vec![(0.0, 1.0), (1.0, 3.0)],
                    dots: false,
                    style: Style::default(),
                }]),
            ),
            panel("ISL histogram", histogram(&[1.0, 2.0, 2.0], 2)),
            panel("Sessions", Body::Timeline(vec![vec![0.0, 1.0], vec![0.5]])),
            // Degenerate data still draws.
            panel("Empty", Body::Lines(vec![])),
        ];
        let svg = figure_svg(&panels, 2, (400, 300)).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(svg.trim_end().ends_with("</svg>"));
        for p in &panels {
            assert_eq!(
                svg.matches(&format!(">\n{}\n</text>", p.title)).count(),
                1,
                "{}",
                p.title
            );
        }
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn panel_svg_draws_one_bar_per_nonempty_bin() {
        let svg = panel_svg(
            &panel("h", histogram(&[0.0, 0.0, 5.0, 10.0], 2)),
            (300, 200),
        )
        .unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // White background + plotting-area rectangles come first; the bars
        // are filled with palette colour 0.
        let bar = Palette99::pick(0).mix(1.0);
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", bar.0, bar.1, bar.2);
        assert_eq!(svg.matches(&fill).count(), 2, "{svg}");
    }
}
