//! Grafana statistics exports (AIBrix's `stat` workload): per window a
//! request rate and prompt/completion length percentiles. Each window's
//! lengths follow a lognormal fitted to its percentiles; arrivals are
//! Poisson at its rate.

use std::path::Path;

use super::rng::normal_quantile;
use crate::csv::Fields;
use crate::error::{Error, Result};

/// `--stat-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatType {
    /// Traffic `Time,Total,Success,4xx Error[,5xx Error]`; prompt lengths
    /// `Time,P50,P70,P90,P99`; completion lengths `Time,P50,P70,P95,P99`.
    Maas,
    /// `Time` in epoch ms; traffic has one rate column, the byte file
    /// `recv_bytes…` and `sent_bytes…` columns (summed).
    Cloudide,
}

/// A lognormal: ln X ~ N(mu, sigma²).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormal {
    pub mu: f64,
    pub sigma: f64,
}

/// Least squares on the log-quantiles: minimises Σ (mu + sigma·z_p − ln x_p)²,
/// which is a linear regression of ln x on z (AIBrix minimises the same
/// objective numerically). Lengths below 1 count as 1; a negative slope
/// (decreasing percentiles) gives sigma 0.
pub fn fit_lognormal(quantiles: &[(f64, f64)]) -> LogNormal {
    let pts: Vec<(f64, f64)> = quantiles
        .iter()
        .map(|&(p, x)| (normal_quantile(p), libm::log(x.max(1.0))))
        .collect();
    let n = pts.len() as f64;
    let mz = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let szz: f64 = pts.iter().map(|p| (p.0 - mz) * (p.0 - mz)).sum();
    let szy: f64 = pts.iter().map(|p| (p.0 - mz) * (p.1 - my)).sum();
    let sigma = if szz > 0.0 { (szy / szz).max(0.0) } else { 0.0 };
    LogNormal {
        mu: my - sigma * mz,
        sigma,
    }
}

/// One window of the statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Start, ms since the first window.
    pub start_ms: f64,
    /// Requests per second (already divided by --qps-scale).
    pub rate: f64,
    pub input: LogNormal,
    pub output: LogNormal,
}

/// A CSV file: its header and rows, each with its line number.
struct Csv {
    path: String,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

/// A line's fields through the one CSV reader (`crate::csv`: quotes,
/// doubled quotes, trimming; `""` is empty, and reads as 0 in `num`).
fn split_csv(path: &str, no: usize, line: &str) -> Result<Vec<String>> {
    let mut f = Fields::default();
    f.split(line.as_bytes())
        .map_err(|e| Error::Input(format!("{path}: line {no}: {e}")))?;
    Ok((0..f.len())
        .map(|c| f.text(line.as_bytes(), c).unwrap_or_default().into_owned())
        .collect())
}

impl Csv {
    fn read(path: &Path) -> Result<Csv> {
        let bytes = std::fs::read(path).map_err(|source| Error::NoInput {
            path: path.to_path_buf(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
            let col = at
                - bytes[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1)
                + 1;
            Error::Input(format!(
                "{}: line {line}: byte {col} is not UTF-8 (save the export as UTF-8)",
                path.display()
            ))
        })?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let name = path.display().to_string();
        let Some((hi, h)) = lines.next() else {
            return Err(Error::Input(format!(
                "{name}: empty file (expected a header line)"
            )));
        };
        let header = split_csv(&name, hi + 1, h.trim_start_matches('\u{feff}'))?;
        let rows = lines
            .map(|(i, l)| Ok((i + 1, split_csv(&name, i + 1, l)?)))
            .collect::<Result<_>>()?;
        Ok(Csv {
            path: name,
            header,
            rows,
        })
    }

    fn col(&self, name: &str) -> Result<usize> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            Error::Input(format!(
                "{}: line 1: no column `{name}` (the header has {})",
                self.path,
                self.header.join(", ")
            ))
        })
    }

    fn cell<'a>(&self, row: &'a (usize, Vec<String>), col: usize) -> Result<&'a str> {
        row.1.get(col).map(String::as_str).ok_or_else(|| {
            Error::Input(format!(
                "{}: line {}: column {} (`{}`) is missing",
                self.path,
                row.0,
                col + 1,
                self.header[col]
            ))
        })
    }

    /// A number; empty, `undefined` and `null` read as 0 (as AIBrix does).
    fn num(&self, row: &(usize, Vec<String>), col: usize) -> Result<f64> {
        let s = self.cell(row, col)?;
        if s.is_empty() || s == "undefined" || s == "null" {
            return Ok(0.0);
        }
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                Error::Input(format!(
                    "{}: line {}: column {} (`{}`): `{s}` is not a number",
                    self.path,
                    row.0,
                    col + 1,
                    self.header[col]
                ))
            })
    }

    fn time(&self, row: &(usize, Vec<String>), col: usize) -> Result<f64> {
        let s = self.cell(row, col)?;
        parse_time_ms(s).ok_or_else(|| {
            Error::Input(format!(
                "{}: line {}: column {} (`Time`): `{s}` is not `YYYY-MM-DD HH:MM:SS` or epoch ms",
                self.path,
                row.0,
                col + 1
            ))
        })
    }
}

/// `YYYY-MM-DD HH:MM:SS` (Grafana's export, UTC) or a number of epoch ms.
pub fn parse_time_ms(s: &str) -> Option<f64> {
    if let Ok(v) = s.parse::<f64>() {
        return Some(v);
    }
    let (date, time) = s.split_once([' ', 'T'])?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<f64> = time
        .trim_end_matches('Z')
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if d.len() != 3 || t.len() != 3 {
        return None;
    }
    // Days from 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400) as f64 + t[0] * 3600.0 + t[1] * 60.0 + t[2]) * 1000.0)
}

/// The scales of `--qps-scale`, `--input-scale`, `--output-scale`.
#[derive(Debug, Clone, Copy)]
pub struct Scales {
    pub qps: f64,
    pub input: f64,
    pub output: f64,
}

/// One joined row of the exports: its time (ms), its rate, and the four
/// input and output length quantiles.
type StatRow = (f64, f64, [f64; 4], [f64; 4]);

/// Reads the exports into windows, in time order. The window length is the
/// mean spacing of the rows (AIBrix's rule).
pub fn read(
    kind: StatType,
    traffic: &Path,
    input: &Path,
    output: Option<&Path>,
    scales: Scales,
) -> Result<(Vec<Window>, f64)> {
    let traffic = Csv::read(traffic)?;
    let lens = Csv::read(input)?;
    // Both files need a Time column before anything else is read.
    traffic.col("Time")?;
    lens.col("Time")?;
    let mut rows = match kind {
        StatType::Maas => {
            let out_path = output.ok_or_else(|| {
                Error::Usage("--stat-type maas needs --completion-len-file".into())
            })?;
            maas_rows(&traffic, &lens, &Csv::read(out_path)?)?
        }
        StatType::Cloudide => cloudide_rows(&traffic, &lens)?,
    };
    if rows.is_empty() {
        return Err(Error::Input(format!(
            "{}: no rows (or no Time shared by all the files)",
            traffic.path
        )));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(windows(&rows, scales))
}

/// The columns `names` of `csv`.
fn quantile_cols(csv: &Csv, names: [&str; 4]) -> Result<Vec<usize>> {
    names.map(|c| csv.col(c)).into_iter().collect()
}

/// The quantile columns `cols` of `csv`, by the bits of each row's time.
fn quantiles_by_time(
    csv: &Csv,
    cols: &[usize],
) -> Result<std::collections::HashMap<u64, [f64; 4]>> {
    let tcol = csv.col("Time")?;
    let mut by_time = std::collections::HashMap::new();
    for r in &csv.rows {
        let mut q = [0.0; 4];
        for (k, &c) in cols.iter().enumerate() {
            q[k] = csv.num(r, c)?;
        }
        by_time.insert(csv.time(r, tcol)?.to_bits(), q);
    }
    Ok(by_time)
}

/// The rows of the MaaS exports: the traffic's successes, with the length
/// quantiles of the same Time (an inner join on Time, as AIBrix's merge).
fn maas_rows(traffic: &Csv, lens: &Csv, outs: &Csv) -> Result<Vec<StatRow>> {
    let tt = traffic.col("Time")?;
    outs.col("Time")?;
    let rate_col = traffic.col("Success")?;
    let icols = quantile_cols(lens, ["P50", "P70", "P90", "P99"])?;
    let ocols = quantile_cols(outs, ["P50", "P70", "P95", "P99"])?;
    let ins = quantiles_by_time(lens, &icols)?;
    let ous = quantiles_by_time(outs, &ocols)?;
    let mut rows = Vec::new();
    for r in &traffic.rows {
        let t = traffic.time(r, tt)?;
        let rate = traffic.num(r, rate_col)?;
        if let (Some(i), Some(o)) = (ins.get(&t.to_bits()), ous.get(&t.to_bits())) {
            rows.push((t, rate, *i, *o));
        }
    }
    Ok(rows)
}

/// The rows of the CloudIDE exports: the traffic's rate, with per-request
/// sizes from the byte counts of the same Time.
fn cloudide_rows(traffic: &Csv, lens: &Csv) -> Result<Vec<StatRow>> {
    let tt = traffic.col("Time")?;
    let lt = lens.col("Time")?;
    if traffic.header.len() < 2 {
        return Err(Error::Input(format!(
            "{}: line 1: expected `Time` and a rate column",
            traffic.path
        )));
    }
    let rate_col = usize::from(tt == 0);
    let recv: Vec<usize> = (0..lens.header.len())
        .filter(|&c| lens.header[c].starts_with("recv_bytes"))
        .collect();
    let sent: Vec<usize> = (0..lens.header.len())
        .filter(|&c| lens.header[c].starts_with("sent_bytes"))
        .collect();
    if recv.is_empty() || sent.is_empty() {
        return Err(Error::Input(format!(
            "{}: line 1: expected `recv_bytes…` and `sent_bytes…` columns",
            lens.path
        )));
    }
    let mut bytes = std::collections::HashMap::new();
    for r in &lens.rows {
        let mut rs = 0.0;
        for &c in &recv {
            rs += lens.num(r, c)?;
        }
        let mut ss = 0.0;
        for &c in &sent {
            ss += lens.num(r, c)?;
        }
        bytes.insert(lens.time(r, lt)?.to_bits(), (rs, ss));
    }
    let mut rows = Vec::new();
    for r in &traffic.rows {
        let t = traffic.time(r, tt)?;
        let rate = traffic.num(r, rate_col)?;
        let (rs, ss) = bytes.get(&t.to_bits()).copied().unwrap_or((0.0, 0.0));
        // Bytes per second over requests per second: per-request
        // sizes; the output from the sent bytes (AIBrix reuses recv).
        let per = |b: f64| if rate > 0.0 { b / rate } else { 0.0 };
        rows.push((t, rate, [per(rs); 4], [per(ss); 4]));
    }
    Ok(rows)
}

/// The windows of `rows` (at least one, in time order), each from its
/// row's time on, and the window length.
fn windows(rows: &[StatRow], scales: Scales) -> (Vec<Window>, f64) {
    let t0 = rows[0].0;
    let window_ms = if rows.len() > 1 {
        (rows[rows.len() - 1].0 - t0) / (rows.len() - 1) as f64
    } else {
        1000.0
    };
    let ip = [0.5, 0.7, 0.9, 0.99];
    let op = [0.5, 0.7, 0.95, 0.99];
    let fit = |ps: [f64; 4], xs: [f64; 4], scale: f64| {
        let q: Vec<(f64, f64)> = ps.iter().zip(xs).map(|(&p, x)| (p, x / scale)).collect();
        fit_lognormal(&q)
    };
    let windows = rows
        .iter()
        .map(|&(t, rate, i, o)| Window {
            start_ms: t - t0,
            rate: rate / scales.qps,
            input: fit(ip, i, scales.input),
            output: fit(op, o, scales.output),
        })
        .collect();
    (windows, window_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_known_parameters_from_exact_percentiles() {
        let (mu, sigma) = (6.5_f64, 0.7_f64);
        for ps in [[0.5, 0.7, 0.9, 0.99], [0.5, 0.7, 0.95, 0.99]] {
            let q: Vec<(f64, f64)> = ps
                .iter()
                .map(|&p| (p, libm::exp(mu + sigma * normal_quantile(p))))
                .collect();
            let f = fit_lognormal(&q);
            assert!((f.mu - mu).abs() < 1e-9, "{f:?}");
            assert!((f.sigma - sigma).abs() < 1e-9, "{f:?}");
        }
        // Equal percentiles: a point mass.
        let f = fit_lognormal(&[(0.5, 100.0), (0.9, 100.0)]);
        assert_eq!(f.sigma, 0.0);
        assert!((libm::exp(f.mu) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn grafana_times_parse() {
        assert_eq!(parse_time_ms("1970-01-01 00:00:01"), Some(1000.0));
        assert_eq!(
            parse_time_ms("2024-03-01 00:00:00"),
            Some(1_709_251_200_000.0)
        );
        assert_eq!(parse_time_ms("1700000000000"), Some(1.7e12));
        assert_eq!(parse_time_ms("yesterday"), None);
    }

    #[test]
    fn csv_fields_may_be_quoted() {
        assert_eq!(
            split_csv("f", 1, "a,\"b,c\",d").unwrap(),
            vec!["a", "b,c", "d"]
        );
        assert_eq!(split_csv("f", 1, "\"\", 1").unwrap(), vec!["", "1"]);
        assert_eq!(
            split_csv("f.csv", 4, "1,\"2").unwrap_err().to_string(),
            "f.csv: line 4: column 2: unterminated quoted field"
        );
    }
}
