//! The readable report: aligned tables, thousands separators, the AIPerf
//! section first.

use std::fmt::Write;

use super::Report;
use crate::finding::Finding;
use crate::stats::Summary;

/// `1234567` -> `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number with `decimals` places and thousands separators: `12,035.06`.
pub fn decimal(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let text = format!("{:.*}", decimals, x.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let int = int
        .parse::<u64>()
        .map(thousands)
        .unwrap_or_else(|_| int.to_string());
    let sign = if x < 0.0 && text.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "n/a".to_string(), |v| decimal(v, decimals))
}

fn percent(x: f64) -> String {
    format!("{}%", decimal(x * 100.0, 2))
}

/// One label/value row. The value is right-aligned in its column; the
/// note (first line numbers of a finding) follows it unaligned.
struct Pair {
    label: String,
    value: String,
    note: String,
}

fn pair(label: impl Into<String>, value: String) -> Pair {
    Pair {
        label: label.into(),
        value,
        note: String::new(),
    }
}

/// A finding's count, noted with its first line numbers.
fn counted(label: &str, f: &Finding) -> Pair {
    Pair {
        label: label.to_string(),
        value: thousands(f.count),
        note: if f.count == 0 {
            String::new()
        } else {
            format!("  ({})", f.first_lines_text())
        },
    }
}

/// Label/value rows with the values right-aligned in one column.
fn pairs(out: &mut String, rows: &[Pair]) {
    let lw = rows
        .iter()
        .map(|p| p.label.chars().count())
        .max()
        .unwrap_or(0);
    let vw = rows
        .iter()
        .map(|p| p.value.chars().count())
        .max()
        .unwrap_or(0);
    for p in rows {
        let _ = writeln!(out, "  {:<lw$}  {:>vw$}{}", p.label, p.value, p.note);
    }
}

fn stats_table(out: &mut String, rows: &[(&str, Option<Summary>)], decimals: usize) {
    let head = ["mean", "std dev", "min", "p25", "median", "p75", "max"];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, s)| match s {
            Some(s) => [s.mean, s.std_dev, s.min, s.p25, s.median, s.p75, s.max]
                .iter()
                .map(|&v| decimal(v, decimals))
                .collect(),
            None => vec!["n/a".to_string(); 7],
        })
        .collect();
    let lw = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..7)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].len())
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = write!(out, "  {:<lw$}", "");
    for (h, w) in head.iter().zip(&widths) {
        let _ = write!(out, "  {h:>w$}");
    }
    out.push('\n');
    for ((label, _), row) in rows.iter().zip(&cells) {
        let _ = write!(out, "  {label:<lw$}");
        for (cell, w) in row.iter().zip(&widths) {
            let _ = write!(out, "  {cell:>w$}");
        }
        out.push('\n');
    }
}

pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    aiperf(&mut out, r);
    blocks(&mut out, &r.blocks);
    cache(&mut out, &r.cache);
    timing(&mut out, &r.timing);
    sessions(&mut out, &r.sessions);
    graphs(&mut out, &r.graphs);
    lint(&mut out, &r.lint, r.graphs.graph_rows > 0);
    input(&mut out, &r.input);
    out
}

fn aiperf(out: &mut String, r: &Report) {
    let a = &r.aiperf;
    let _ = writeln!(
        out,
        "AIPerf analyze-trace (block size {})",
        r.blocks.block_size
    );
    pairs(
        out,
        &[
            pair("total requests", thousands(a.total_requests)),
            pair("unique prefixes", thousands(a.unique_prefixes)),
            pair("prefix groups", thousands(a.num_prefix_groups)),
            pair("cache hit rate", decimal(a.cache_hit_rate, 4)),
            pair("prefix reuse ratio", decimal(a.prefix_reuse_ratio, 4)),
        ],
    );
    out.push('\n');
    stats_table(
        out,
        &[
            ("input length", a.isl_stats),
            ("context length", a.context_length_stats),
            ("unique prompt length", a.unique_prompt_length_stats),
            ("output length", a.osl_stats),
        ],
        2,
    );
    stats_table(out, &[("hit rate", a.hit_rate_stats)], 4);
}

fn blocks(out: &mut String, b: &super::blocksize::BlockReport) {
    let feasible = match (b.feasible_min, b.feasible_max) {
        (Some(lo), Some(hi)) => format!("{} to {}", thousands(lo), thousands(hi)),
        (Some(lo), None) => format!("{} or more", thousands(lo)),
        _ => "none fits every row".to_string(),
    };
    let _ = writeln!(out, "\nBlock size");
    pairs(
        out,
        &[
            pair("used", thousands(b.block_size)),
            pair(
                "detected",
                b.detected
                    .map_or("n/a (no hash_ids)".to_string(), thousands),
            ),
            pair("sizes every row allows", feasible),
            counted("inconsistent rows", &b.inconsistent_rows),
            counted("ids at two sizes", &b.conflicting_ids),
        ],
    );
}

fn cache(out: &mut String, c: &super::cache::CacheModel) {
    let order = match c.order {
        super::cache::Order::File => "file",
        super::cache::Order::Timestamp => "timestamp",
    };
    let _ = writeln!(
        out,
        "\nPrefix cache model ({order} order, token-weighted; {} input tokens)",
        decimal(c.input_tokens, 0)
    );
    let rows: Vec<Pair> = c
        .results
        .iter()
        .map(|res| Pair {
            label: res.cache_blocks.map_or("infinite cache".to_string(), |n| {
                format!("LRU {} blocks", thousands(n))
            }),
            value: format!("{} hit", percent(res.hit_rate)),
            note: format!("  ({} tokens)", decimal(res.hit_tokens, 0)),
        })
        .collect();
    pairs(out, &rows);
}

fn timing(out: &mut String, t: &super::timing::TimingStats) {
    let _ = writeln!(out, "\nTiming");
    let sorted = if t.sorted {
        pair("sorted", "yes".to_string())
    } else {
        let mut p = counted("sorted", &t.out_of_order);
        p.value = format!("no, {} rows go back", p.value);
        p
    };
    pairs(
        out,
        &[
            pair("rows with timestamp", thousands(t.rows_with_timestamp)),
            sorted,
            pair(
                "span",
                t.span_ms.map_or("n/a".to_string(), |s| {
                    format!("{} s", decimal(s / 1000.0, 3))
                }),
            ),
            pair("mean rate (req/s)", opt(t.mean_rate_per_s, 3)),
            pair("peak rate, 1 s window", opt(t.peak_rate_1s, 3)),
            pair("peak rate, 10 s window", opt(t.peak_rate_10s, 3)),
            pair("inter-arrival p50 (ms)", opt(t.inter_arrival_p50_ms, 3)),
            pair("inter-arrival p99 (ms)", opt(t.inter_arrival_p99_ms, 3)),
        ],
    );
}

fn sessions(out: &mut String, s: &super::sessions::Sessions) {
    let _ = writeln!(out, "\nSessions");
    pairs(
        out,
        &[
            pair("sessions", thousands(s.sessions)),
            pair("rows in sessions", thousands(s.rows_in_sessions)),
            pair("rows without session_id", thousands(s.rows_without_session)),
            pair("later turns", thousands(s.later_turns)),
            pair(
                "later turns' prompt repeated",
                s.repeated_tokens_fraction
                    .map_or("n/a".to_string(), percent),
            ),
        ],
    );
    if s.turns_per_session.is_some() || s.delay_ms.is_some() {
        stats_table(
            out,
            &[
                ("turns per session", s.turns_per_session),
                ("delay (ms)", s.delay_ms),
            ],
            2,
        );
    }
}

/// The agent-graph section, for a trace with graph rows only (a plain
/// trace's report is unchanged). What the numbers assume is in
/// `analyze::graphs` and docs/guide/agents.md.
fn graphs(out: &mut String, g: &super::graphs::GraphReport) {
    if g.graph_rows == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "\nAgent graphs (calls taking no time; see docs/guide/agents.md)"
    );
    let fan_out: Vec<String> = g
        .fan_out
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(k, n)| format!("{k}: {}", thousands(*n)))
        .collect();
    pairs(
        out,
        &[
            pair("graph rows", thousands(g.graph_rows)),
            pair("plain session rows", thousands(g.plain_session_rows)),
            pair("tasks (graph sessions)", thousands(g.tasks)),
            pair("max fan-out", thousands(g.max_fan_out)),
            pair("calls by fan-out", fan_out.join(", ")),
            pair("peak parallelism", thousands(g.peak_parallelism)),
            pair("think time (ms)", decimal(g.think_ms, 2)),
            pair("tool wait (ms)", decimal(g.tool_wait_ms, 2)),
            pair("prefix resets", thousands(g.prefix_resets)),
        ],
    );
    if g.tasks > 0 {
        stats_table(
            out,
            &[
                ("calls per task", g.calls_per_task),
                ("depth", g.depth),
                ("parallelism", g.parallelism),
                ("critical path (ms)", g.critical_path_ms),
                ("critical path share", g.critical_path_share),
            ],
            2,
        );
    }
    for p in &g.first_problems {
        let _ = writeln!(out, "  {p}");
    }
}

fn lint(out: &mut String, l: &super::lint::Lint, with_graphs: bool) {
    let _ = writeln!(out, "\nLint");
    let graph = l.graph.named();
    let shown = graph.iter().filter(|(_, f)| with_graphs || f.count > 0);
    let rows: Vec<Pair> = l
        .named()
        .iter()
        .chain(shown)
        .map(|(name, f)| counted(name, f))
        .collect();
    pairs(out, &rows);
}

fn input(out: &mut String, i: &super::InputSummary) {
    let _ = writeln!(out, "\nInput");
    let mut rows = vec![
        pair("rows", thousands(i.rows)),
        pair("rows with hash_ids", thousands(i.rows_with_ids)),
        pair("blocks", thousands(i.blocks)),
        pair("distinct ids", thousands(i.distinct_ids)),
    ];
    if i.skipped_lines > 0 {
        let f = Finding {
            count: i.skipped_lines,
            first_lines: i.first_skipped_lines.clone(),
        };
        rows.push(counted("skipped bad lines", &f));
    }
    pairs(out, &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formatting() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(12_031), "12,031");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(decimal(12035.0613, 2), "12,035.06");
        assert_eq!(decimal(-1234.5, 1), "-1,234.5");
        assert_eq!(decimal(-0.001, 2), "0.00");
        assert_eq!(decimal(7.0, 0), "7");
        assert_eq!(percent(0.38425), "38.42%");
    }
}
