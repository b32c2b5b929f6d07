//! The figure of an `mc-replay` sweep: TTFT p50 and p99 against output
//! throughput (the serving curve: where latency turns up as throughput
//! stops growing), and output throughput against the swept value.

use std::path::Path;

use super::{figure_svg, Body, Panel, PlotError, Series, Style, Unit};
use crate::error::{Error, Result};
use crate::results::sweep::{self, Point};

/// The sweep's panels, from its points in sweep order. `parameter` is
/// `rate`, `concurrency` or `speedup` (it names the second panel's axis).
pub fn sweep_curve(parameter: &str, points: &[Point]) -> Vec<Panel> {
    // p99 dashed next to a solid p50, as in mc-report's panels.
    let line = |name: &str, pts: Vec<(f64, f64)>| Series {
        name: name.into(),
        points: pts,
        dots: false,
        style: Style {
            color: None,
            dashed: name.ends_with("p99"),
        },
    };
    let ttft = |q: fn(&Point) -> Option<f64>| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| q(p).map(|t| (p.output_token_throughput, t)))
            .collect()
    };
    let unit = match parameter {
        "rate" => "rate (req/s)".to_string(),
        "speedup" => "speedup (x)".to_string(),
        other => other.to_string(),
    };
    vec![
        Panel {
            title: "TTFT by output throughput".into(),
            x_label: "output throughput (tok/s)".into(),
            y_label: "TTFT".into(),
            x_unit: Unit::Plain,
            y_unit: Unit::Ms,
            body: Body::Lines(vec![
                line("TTFT p50", ttft(|p| p.ttft_p50_ms)),
                line("TTFT p99", ttft(|p| p.ttft_p99_ms)),
            ]),
        },
        Panel {
            title: format!("Output throughput by {parameter}"),
            x_label: unit,
            y_label: "output throughput (tok/s)".into(),
            x_unit: Unit::Plain,
            y_unit: Unit::Plain,
            body: Body::Lines(vec![line(
                "output tok/s",
                points
                    .iter()
                    .map(|p| (p.value, p.output_token_throughput))
                    .collect(),
            )]),
        },
    ]
}

/// The sweep's figure as one SVG document.
pub fn sweep_svg(parameter: &str, points: &[Point]) -> std::result::Result<String, PlotError> {
    figure_svg(&sweep_curve(parameter, points), 2, (560, 400))
}

/// `mc-plot --sweep DIR`: reads DIR/sweep.json and each run's summary,
/// returns the SVG and a one-line description for stderr.
pub fn figure(dir: &Path) -> Result<(String, String)> {
    let (param, points, stopped) = sweep::read(dir)?;
    if points.is_empty() {
        return Err(Error::Input(format!(
            "{}: the sweep ran no value: nothing to plot",
            dir.join("sweep.json").display()
        )));
    }
    let svg = sweep_svg(param.name(), &points).map_err(|e| Error::Other(e.into()))?;
    let about = format!(
        "mc-plot: sweep of {} over {} values{}",
        param.name(),
        points.len(),
        stopped.map_or(String::new(), |s| format!(" (stopped after {})", s.value))
    );
    Ok((svg, about))
}
