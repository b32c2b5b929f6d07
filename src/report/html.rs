//! `mc-report --html`: one self-contained page. Every figure is its data
//! and the page's own inline script draws it (`plot::web`: hover for the
//! exact values, drag to zoom, legend to hide a series, tables sorted by
//! a click on a header): no library, no fonts, no links to anything, so
//! the file opens from disk anywhere; it holds no URL at all (the script
//! writes its SVG as markup, which needs no namespace, and the server is
//! named by host and port only).

use std::fmt::Write as _;

use crate::plot::{web, Panel, PlotError};

use super::compare::{change_text, MetricRow, Unit};
use super::summary::describe;
use super::{Report, SweepMeta};

const STYLE: &str = "body{font-family:sans-serif;margin:1em auto;max-width:1340px;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.5em;border-bottom:1px solid #ccc}\
figure{display:inline-block;margin:4px;vertical-align:top}\
table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.85em}\
.note{color:#555}table.runs td,table.runs th{text-align:left}\
.warnings{background:#fff3cd;border:1px solid #e0b400;padding:0.3em 1em;margin:1em 0}.trace-note{color:#555}";

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

fn figure(out: &mut String, p: &Panel) -> Result<(), PlotError> {
    out.push_str(&web::chart_html(p));
    Ok(())
}

/// A sortable table's header row.
fn head(out: &mut String, class: &str, columns: &[String]) {
    let _ = write!(out, "<table class=\"sortable {class}\">\n<thead><tr>");
    for c in columns {
        let _ = write!(out, "<th>{}</th>", esc(c));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
}

/// A cell showing `text`, sorted by `v` (none: by its text).
fn cell(out: &mut String, text: &str, v: Option<f64>) {
    match v.filter(|v| v.is_finite()) {
        Some(v) => {
            let _ = write!(out, "<td data-v=\"{v}\">{}</td>", esc(text));
        }
        None => {
            let _ = write!(out, "<td>{}</td>", esc(text));
        }
    }
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
    let columns: Vec<String> = std::iter::once("metric".to_string())
        .chain(labels.iter().cloned())
        .collect();
    head(out, "compare", &columns);
    for r in rows {
        let _ = write!(out, "<tr><td>{}</td>", esc(&r.metric));
        for (v, c) in r.values.iter().zip(&r.change_pct) {
            let sort_by = *v;
            let v = match (r.unit, v) {
                (_, None) => "-".to_string(),
                (Unit::Ratio, Some(v)) => format!("{:.2}%", v * 100.0),
                (Unit::Count, Some(v)) => format!("{v:.0}"),
                (Unit::Ms, Some(v)) => crate::results::summary::Ms(*v).to_string(),
                (_, Some(v)) => format!("{v:.3}"),
            };
            let c = change_text(*c);
            if c.is_empty() {
                cell(out, &v, sort_by);
            } else {
                cell(out, &format!("{v} ({c})"), sort_by);
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// The terminal's sweep table (`results::sweep::table`) as a sortable
/// table: the same columns, the same figures, sorted by their values.
fn sweep_table(
    out: &mut String,
    param: crate::results::sweep::Param,
    points: &[crate::results::sweep::Point],
) {
    let columns: Vec<String> = std::iter::once(param.name())
        .chain(crate::results::sweep::TABLE_COLUMNS)
        .map(str::to_string)
        .collect();
    head(out, "sweep", &columns);
    for p in points {
        out.push_str("<tr>");
        for (text, value) in p.table_cells() {
            cell(out, &text, value);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// A run's distributions (the terminal's `ms` block) as a sortable table:
/// the same figures, written as the terminal writes them.
fn distributions(out: &mut String, m: &crate::results::summary::Metrics) {
    use crate::results::summary::Ms;
    let columns: Vec<String> = [
        "ms", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max", "count",
    ]
    .iter()
    .map(|c| c.to_string())
    .collect();
    head(out, "dists", &columns);
    for (name, st) in [
        ("ttft", &m.ttft),
        ("tpot", &m.tpot),
        ("itl", &m.itl),
        ("e2e", &m.e2e),
        ("sched_latency", &m.sched_latency),
        ("lag", &m.lag),
    ] {
        let Some(st) = st else { continue };
        out.push_str("<tr>");
        cell(out, name, None);
        for v in [
            st.mean, st.std, st.min, st.p50, st.p90, st.p95, st.p99, st.p99_9, st.max,
        ] {
            cell(out, &Ms(v).to_string(), Some(v));
        }
        cell(out, &st.count.to_string(), Some(st.count as f64));
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// The columns of [`tasks_table`].
const TASK_COLUMNS: [&str; 15] = [
    "run",
    "tasks",
    "calls",
    "with a failed call",
    "makespan p50 ms",
    "p90",
    "p99",
    "max",
    "critical path share",
    "LLM %",
    "wait %",
    "think %",
    "tool %",
    "in flight achieved (mean/max)",
    "graph's timing (mean/max)",
];

/// The runs' agent-graph tasks (the summary's task section), one row per
/// run that had any; nothing when none had.
fn tasks_table(out: &mut String, labels: &[String], r: &Report) {
    let rows: Vec<(&String, &crate::results::tasks::TaskSummary)> = labels
        .iter()
        .zip(&r.summaries)
        .filter_map(|(l, rc)| Some((l, rc.summary.tasks.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "<h2>Tasks (agent graphs)</h2>\n<p class=\"note\">Per task: makespan from its first \
         send to its last end; the critical path back from the call that ended last through \
         the dependency that ended last, and its share of the task's time; calls in flight \
         at once, achieved and as the graph's own timing implies with the measured call \
         times.</p>\n",
    );
    let columns: Vec<String> = TASK_COLUMNS.iter().map(|c| c.to_string()).collect();
    head(out, "tasks", &columns);
    for (label, t) in rows {
        task_row(out, label, t);
    }
    out.push_str("</tbody>\n</table>\n");
}

/// One run's row of [`tasks_table`], in [`TASK_COLUMNS`]' order.
fn task_row(out: &mut String, label: &str, t: &crate::results::tasks::TaskSummary) {
    use crate::results::summary::Ms;
    out.push_str("<tr>");
    cell(out, label, None);
    for n in [t.tasks, t.calls, t.tasks_with_failed_call] {
        cell(out, &n.to_string(), Some(n as f64));
    }
    match &t.makespan {
        Some(m) => {
            for v in [m.p50, m.p90, m.p99, m.max] {
                cell(out, &Ms(v).to_string(), Some(v));
            }
        }
        None => {
            for _ in 0..4 {
                cell(out, "-", None);
            }
        }
    }
    let share = t.critical_path_share * 100.0;
    cell(out, &format!("{share:.0}%"), Some(share));
    let p = &t.critical_path_ms;
    for v in [p.llm, p.wait, p.think, p.tool] {
        let pct = if p.total() > 0.0 {
            v / p.total() * 100.0
        } else {
            0.0
        };
        cell(out, &format!("{pct:.1}"), Some(pct));
    }
    let q = &t.parallelism;
    cell(
        out,
        &format!("{} / {}", q.achieved_mean, q.achieved_max),
        Some(q.achieved_mean),
    );
    cell(
        out,
        &format!("{} / {}", q.recorded_mean, q.recorded_max),
        Some(q.recorded_mean),
    );
    out.push_str("</tr>\n");
}

/// The replayed trace's figure (mc-plot's panels) and what it covers.
pub struct TraceSection {
    pub panels: Vec<Panel>,
    /// Which rows are drawn (all, or only those the run replayed).
    pub note: String,
}

/// The page. `trace` is mc-plot's figure of the replayed trace.
pub fn page(
    r: &Report,
    sweep_panels: &[Panel],
    run_panels: &[Panel],
    trace: Option<&TraceSection>,
) -> Result<String, PlotError> {
    let labels: Vec<String> = r.runs.iter().map(|x| x.label.clone()).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>mc-report: {}</title>\n<style>{STYLE}{}</style>\n</head>\n<body>\n\
         <h1>mc-report: {}</h1>\n",
        esc(&labels.join(", ")),
        web::STYLE,
        esc(&labels.join(", "))
    );
    // Every caution the terminal prints, first (a page that shows a 99.95%
    // hit rate must say when the fidelity check flagged it).
    warnings(&mut s, &cautions(r));
    intro(&mut s, r);
    runs_table(&mut s, r);
    if let Some(sw) = &r.sweep {
        sweep_section(&mut s, r, sw, sweep_panels)?;
    }
    s.push_str("<h2>Summary</h2>\n");
    if r.runs.len() == 1 {
        distributions(&mut s, &r.summaries[0].summary.metrics);
        let _ = writeln!(s, "<pre>{}</pre>", esc(&r.summaries[0].table(&labels[0])));
    } else {
        compare_table(&mut s, &labels, &r.rows());
    }
    tasks_table(&mut s, &labels, r);
    let (over, rest) = run_panels.split_at(3.min(run_panels.len()));
    let (cdfs, rest) = rest.split_at(3.min(rest.len()));
    let (load, sessions) = rest.split_at(3.min(rest.len()));
    section(&mut s, "Latency over the run", over)?;
    section(&mut s, "Latency distributions", cdfs)?;
    section(&mut s, "Load and schedule", load)?;
    section(&mut s, "Sessions", sessions)?;
    if let Some(t) = trace {
        s.push_str("<h2>The replayed trace (mc-plot's figure)</h2>\n");
        let _ = writeln!(s, "<p class=\"trace-note\">{}</p>", esc(&t.note));
        for p in &t.panels {
            figure(&mut s, p)?;
        }
    }
    let _ = write!(s, "<script>\n{}</script>\n", web::SCRIPT);
    s.push_str("</body>\n</html>\n");
    Ok(s)
}

/// Every caution the terminal prints for the runs (each named by its run
/// when there are several), and where a sweep stopped.
fn cautions(r: &Report) -> Vec<String> {
    let several = r.runs.len() > 1;
    let mut cautions: Vec<String> = Vec::new();
    for (run, rc) in r.runs.iter().zip(&r.summaries) {
        // The terminal's own `note:` lines (the recomputation's and the
        // metrics block's), word for word.
        let table = rc.table(&run.label);
        let notes = table
            .lines()
            .filter(|l| l.starts_with("note: "))
            .map(str::to_string);
        for c in rc.summary.cautions().into_iter().chain(notes) {
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
    cautions
}

/// The cautions' box; nothing when there are none.
fn warnings(s: &mut String, cautions: &[String]) {
    if cautions.is_empty() {
        return;
    }
    s.push_str("<div class=\"warnings\">\n<ul>\n");
    for c in cautions {
        let _ = writeln!(s, "<li>{}</li>", esc(c));
    }
    s.push_str("</ul>\n</div>\n");
}

/// Where the numbers come from and how to use the charts.
fn intro(s: &mut String, r: &Report) {
    let results: usize = r.runs.iter().map(|x| x.results.len()).sum();
    let _ = writeln!(
        s,
        "<p class=\"note\">mc-report {} from {results} result lines; every number is \
         recomputed from the raw values in the result lines. Hover a chart for exact values, \
         drag across it to zoom (double-click resets), click a legend entry to hide or show \
         it, click a column's header to sort a table.</p>\n\
         <noscript><p class=\"warnings\">The charts are drawn by this page's own script \
         (inline; nothing is fetched): allow scripts to see them.</p></noscript>",
        env!("CARGO_PKG_VERSION")
    );
}

/// The runs: each one's label, description and result files.
fn runs_table(s: &mut String, r: &Report) {
    s.push_str("<h2>Runs</h2>\n");
    head(
        s,
        "runs",
        &["run".into(), "description".into(), "results".into()],
    );
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
    s.push_str("</tbody>\n</table>\n");
}

/// The sweep: where it stopped, the terminal's table value by value, and
/// its figures.
fn sweep_section(
    s: &mut String,
    r: &Report,
    sw: &SweepMeta,
    sweep_panels: &[Panel],
) -> Result<(), PlotError> {
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
    if let Some(param) = crate::results::sweep::Param::from_name(&sw.file.parameter) {
        let points: Vec<crate::results::sweep::Point> = sw
            .file
            .runs
            .iter()
            .zip(&r.summaries)
            .map(|(e, rc)| crate::results::sweep::Point::of(e.value, &rc.summary))
            .collect();
        sweep_table(s, param, &points);
    }
    for p in sweep_panels {
        figure(s, p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }

    #[test]
    fn cells_sort_by_their_value() {
        let mut s = String::new();
        cell(&mut s, "1.5 s", Some(1500.0));
        cell(&mut s, "-", None);
        cell(&mut s, "x", Some(f64::NAN));
        assert_eq!(s, "<td data-v=\"1500\">1.5 s</td><td>-</td><td>x</td>");
    }
}
