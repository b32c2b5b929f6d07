//! `mc-report --html`: one self-contained page. Every figure is inline SVG
//! (no scripts, no fonts, no links to anything), so the file opens from
//! disk anywhere; it holds no URL at all (the SVG namespace attribute is
//! left out: HTML5 does not need it on inline SVG, and the server is
//! named by host and port only).

use std::fmt::Write as _;

use crate::plot::{panel_svg, Panel, PlotError};

use super::compare::{change_text, MetricRow, Unit};
use super::summary::describe;
use super::Report;

/// The size of one panel, in pixels.
const CELL: (u32, u32) = (640, 380);

const STYLE: &str = "body{font-family:sans-serif;margin:1em auto;max-width:1340px;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.5em;border-bottom:1px solid #ccc}\
figure{display:inline-block;margin:4px;vertical-align:top}\
table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.85em}\
.note{color:#555}table.runs td{text-align:left}\
.warnings{background:#fff3cd;border:1px solid #e0b400;padding:0.3em 1em;margin:1em 0}";

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            other => out.push(other),
        }
    }
    out
}

/// A panel as inline SVG: plotters' document without its XML namespace.
pub fn inline_svg(svg: &str) -> String {
    svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
}

fn figure(out: &mut String, p: &Panel) -> Result<(), PlotError> {
    let svg = panel_svg(p, CELL)?;
    let _ = writeln!(out, "<figure>\n{}</figure>", inline_svg(&svg));
    Ok(())
}

fn section(out: &mut String, title: &str, panels: &[Panel]) -> Result<(), PlotError> {
    if panels.is_empty() {
        return Ok(());
    }
    let _ = writeln!(out, "<h2>{}</h2>", esc(title));
    for p in panels {
        figure(out, p)?;
    }
    Ok(())
}

fn compare_table(out: &mut String, labels: &[String], rows: &[MetricRow]) {
    out.push_str("<table>\n<tr><th>metric</th>");
    for l in labels {
        let _ = write!(out, "<th>{}</th>", esc(l));
    }
    out.push_str("</tr>\n");
    for r in rows {
        let _ = write!(out, "<tr><td>{}</td>", esc(&r.metric));
        for (v, c) in r.values.iter().zip(&r.change_pct) {
            let v = match (r.unit, v) {
                (_, None) => "-".to_string(),
                (Unit::Ratio, Some(v)) => format!("{:.2}%", v * 100.0),
                (Unit::Count, Some(v)) => format!("{v:.0}"),
                (Unit::Ms, Some(v)) => crate::results::summary::Ms(*v).to_string(),
                (_, Some(v)) => format!("{v:.3}"),
            };
            let c = change_text(*c);
            if c.is_empty() {
                let _ = write!(out, "<td>{}</td>", esc(&v));
            } else {
                let _ = write!(out, "<td>{} ({})</td>", esc(&v), esc(&c));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// The page. `trace_svg` is mc-plot's figure of the replayed trace.
pub fn page(
    r: &Report,
    sweep_panels: &[Panel],
    run_panels: &[Panel],
    trace_svg: Option<&str>,
) -> Result<String, PlotError> {
    let labels: Vec<String> = r.runs.iter().map(|x| x.label.clone()).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>mc-report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>mc-report: {}</h1>\n",
        esc(&labels.join(", ")),
        esc(&labels.join(", "))
    );
    // Every caution the terminal prints, first (a page that shows a 99.95%
    // hit rate must say when the fidelity check flagged it).
    let several = r.runs.len() > 1;
    let mut cautions: Vec<String> = Vec::new();
    for (run, rc) in r.runs.iter().zip(&r.summaries) {
        for c in rc.summary.cautions() {
            cautions.push(if several {
                format!("{}: {c}", run.label)
            } else {
                c
            });
        }
    }
    if let Some(st) = r.sweep.as_ref().and_then(|sw| sw.file.stopped.as_ref()) {
        cautions.push(format!("the sweep stopped at {}: {}", st.value, st.reason));
    }
    if !cautions.is_empty() {
        s.push_str("<div class=\"warnings\">\n<ul>\n");
        for c in &cautions {
            let _ = writeln!(s, "<li>{}</li>", esc(c));
        }
        s.push_str("</ul>\n</div>\n");
    }
    let results: usize = r.runs.iter().map(|x| x.results.len()).sum();
    let _ = writeln!(
        s,
        "<p class=\"note\">mc-report {} from {results} result lines; every number is \
         recomputed from the raw values in the result lines.</p>",
        env!("CARGO_PKG_VERSION")
    );
    s.push_str("<h2>Runs</h2>\n<table class=\"runs\">\n<tr><th>run</th><th>description</th><th>results</th></tr>\n");
    for (run, rc) in r.runs.iter().zip(&r.summaries) {
        let files: Vec<String> = run
            .sources
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&run.label),
            esc(&describe(rc)),
            esc(&files.join(" "))
        );
    }
    s.push_str("</table>\n");
    if let Some(sw) = &r.sweep {
        let _ = writeln!(s, "<h2>Sweep over {}</h2>", esc(&sw.file.parameter));
        if let Some(st) = &sw.file.stopped {
            let at = format!(" at {}", st.value);
            let _ = writeln!(
                s,
                "<p>The sweep stopped{}: {}</p>",
                esc(&at),
                esc(&st.reason)
            );
        }
        // The terminal's sweep table, value by value.
        if let Some(param) = crate::results::sweep::Param::from_name(&sw.file.parameter) {
            let points: Vec<crate::results::sweep::Point> = sw
                .file
                .runs
                .iter()
                .zip(&r.summaries)
                .map(|(e, rc)| crate::results::sweep::Point::of(e.value, &rc.summary))
                .collect();
            let table = crate::results::sweep::table(param, &points, sw.file.stopped.as_ref());
            let _ = writeln!(s, "<pre class=\"sweep\">{}</pre>", esc(&table));
        }
        for p in sweep_panels {
            figure(&mut s, p)?;
        }
    }
    s.push_str("<h2>Summary</h2>\n");
    if r.runs.len() == 1 {
        let _ = writeln!(s, "<pre>{}</pre>", esc(&r.summaries[0].table(&labels[0])));
    } else {
        compare_table(&mut s, &labels, &r.rows());
    }
    let (over, rest) = run_panels.split_at(3.min(run_panels.len()));
    let (cdfs, rest) = rest.split_at(3.min(rest.len()));
    let (load, sessions) = rest.split_at(3.min(rest.len()));
    section(&mut s, "Latency over the run", over)?;
    section(&mut s, "Latency distributions", cdfs)?;
    section(&mut s, "Load and schedule", load)?;
    section(&mut s, "Sessions", sessions)?;
    if let Some(svg) = trace_svg {
        s.push_str("<h2>The replayed trace (mc-plot's figure)</h2>\n");
        let _ = writeln!(s, "<figure>\n{}</figure>", inline_svg(svg));
    }
    s.push_str("</body>\n</html>\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        assert_eq!(
            inline_svg("<svg width=\"1\" xmlns=\"http://www.w3.org/2000/svg\">"),
            "<svg width=\"1\">"
        );
    }
}
