//! Panels for a web page: each [`Panel`] as a JSON document the page's own
//! script (`web.js`, inlined: no network, no library) draws as SVG, with a
//! tooltip of the exact values under the pointer, drag to zoom the x axis
//! (double-click resets), legend entries that hide and show a series, and
//! tables sorted by a click on a column's header.
//!
//! Why a script and not plotters' SVG: zooming redraws the axes, and a
//! page of 10,000 dots as SVG circles is about 1 MB per panel, where the
//! same dots as numbers are about 100 KB.

use serde_json::{json, Value};

use super::{Body, Panel};

/// The page's script: draws every `figure.chart`, sorts `table.sortable`.
pub const SCRIPT: &str = include_str!("web.js");

/// The style of the charts, tooltip and sortable tables.
pub const STYLE: &str =
    "figure.chart{display:inline-block;margin:4px;vertical-align:top;width:600px}\
figure.chart figcaption{font-weight:bold;font-size:0.9em;min-height:2.4em}\
figure.chart svg{display:block;cursor:crosshair;user-select:none}\
.legend span{cursor:pointer;margin-right:1em;font-size:0.85em;white-space:nowrap}\
.legend span.off{opacity:0.35;text-decoration:line-through}\
.legend i{display:inline-block;width:14px;height:4px;margin-right:4px;vertical-align:middle}\
#tip{position:absolute;display:none;pointer-events:none;background:#fff;border:1px solid #888;\
padding:3px 6px;font-size:0.8em;white-space:pre;box-shadow:1px 1px 4px #aaa;z-index:9}\
table.sortable th{cursor:pointer}table.sortable th.asc:after{content:' \\25B2'}\
table.sortable th.desc:after{content:' \\25BC'}";

/// The palette colour `i`, as CSS (the colours plotters draws mc-plot's
/// figures in, so a series looks the same in both).
pub fn css_color(i: usize) -> String {
    use plotters::style::{Color as _, Palette, Palette99};
    let c = Palette99::pick(i).mix(1.0);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A value to six decimals: µs for seconds, ns for milliseconds, with the
/// float noise of a unit change (`12.345000000001`) gone. Not a number
/// (never drawn) becomes `null`.
fn num(v: f64) -> Value {
    if !v.is_finite() {
        return Value::Null;
    }
    let r = (v * 1e6).round() / 1e6;
    // Past 2^53 / 1e6 the rounding itself loses digits: keep the value.
    json!(if r.is_finite() && v.abs() < 9e9 { r } else { v })
}

/// The panel as the page's script reads it.
pub fn panel_value(p: &Panel) -> Value {
    let mut v = json!({
        "title": p.title,
        "x": {"label": p.x_label, "unit": p.x_unit},
        "y": {"label": p.y_label, "unit": p.y_unit},
    });
    match &p.body {
        Body::Lines(series) => {
            v["kind"] = json!("lines");
            v["series"] = series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    json!({
                        "name": s.name,
                        "color": css_color(s.style.color.unwrap_or(i)),
                        "dots": s.dots,
                        "dashed": s.style.dashed,
                        "points": s.points.iter().map(|&(x, y)| json!([num(x), num(y)])).collect::<Vec<_>>(),
                    })
                })
                .collect();
        }
        Body::Histogram { edges, counts } => {
            v["kind"] = json!("histogram");
            v["color"] = json!(css_color(0));
            v["edges"] = edges.iter().map(|&e| num(e)).collect();
            v["counts"] = json!(counts);
        }
        Body::Timeline(lanes) => {
            v["kind"] = json!("timeline");
            v["lanes"] = lanes
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    json!({
                        "color": css_color(i),
                        "marks": l.iter().map(|&t| num(t)).collect::<Vec<_>>(),
                    })
                })
                .collect();
        }
    }
    v
}

/// The panel's JSON, safe inside a `<script>` element: no `<` at all
/// (JSON has none outside strings, where `\u003c` means the same).
pub fn panel_json(p: &Panel) -> String {
    panel_value(p).to_string().replace('<', "\\u003c")
}

/// One chart of the page: a figure the script fills, its data inside.
pub fn chart_html(p: &Panel) -> String {
    format!(
        "<figure class=\"chart\"><script type=\"application/json\">{}</script></figure>\n",
        panel_json(p)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{Series, Style, Unit};

    #[test]
    fn panel_json_round_trips_its_points_and_hides_markup() {
        let p = Panel {
            title: "a </script> b".into(),
            x_label: "time".into(),
            y_label: "TTFT".into(),
            x_unit: Unit::S,
            y_unit: Unit::Ms,
            body: Body::Lines(vec![Series {
                name: "p99".into(),
                points: vec![(12.345 + 1e-12, 1853.214), (0.5, f64::NAN)],
                dots: true,
                style: Style {
                    color: Some(0),
                    dashed: true,
                },
            }]),
        };
        let s = panel_json(&p);
        assert!(!s.contains('<'), "{s}");
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["title"], "a </script> b");
        assert_eq!(v["x"]["unit"], "s");
        assert_eq!(v["y"]["unit"], "ms");
        let pts = &v["series"][0]["points"];
        assert_eq!(pts[0], json!([12.345, 1853.214]));
        assert_eq!(pts[1], json!([0.5, null]));
        assert_eq!(v["series"][0]["dashed"], true);
        assert!(v["series"][0]["color"].as_str().unwrap().starts_with('#'));
    }
}
