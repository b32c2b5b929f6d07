//! The CSV reader's measurement (docs/ARCHITECTURE.md §5): splits every
//! line of a CSV file held in memory with mctrace's reader (`mctrace::csv`)
//! and with `csv-core`, in the same run, and prints MB/s for each (best of
//! `--runs`, default 5). Each way reads every field, so none is skipped.
//!
//! The Azure-2024-shaped input comes from scripts/bench-import.sh's awk:
//!   bash -c 'source <(sed -n "/^gen_azure()/,/^}/p" scripts/bench-import.sh); gen_azure 104857600' > azure.csv
//!   cargo run --release --example csv_split -- azure.csv

use std::time::Instant;

use mctrace::csv::Fields;

/// One way of splitting the whole file; returns the field bytes seen.
type Split = fn(&[u8]) -> usize;

/// Lines without their `\n` (what mc-import's line reader hands over),
/// found with memchr as that reader does.
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < data.len() {
            let end = memchr::memchr(b'\n', &data[at..]).map_or(data.len(), |k| at + k);
            let line = &data[at..end];
            at = end + 1;
            if !line.is_empty() {
                return Some(line);
            }
        }
        None
    })
}

/// mctrace's reader: one `split` a line, then every field.
fn ours(data: &[u8]) -> usize {
    let mut f = Fields::default();
    let mut sum = 0;
    for line in lines(data) {
        f.split(line).expect("well-formed generated CSV");
        for c in 0..f.len() {
            sum += f.get(line, c).map_or(0, |v| v.len());
        }
    }
    sum
}

/// csv-core fed one line at a time (with its `\n`, its best case), as it
/// would be behind mc-import's line reader.
fn core_per_line(data: &[u8]) -> usize {
    let mut rd = csv_core::Reader::new();
    let (mut out, mut ends) = (vec![0u8; 1 << 16], vec![0usize; 64]);
    let mut sum = 0;
    let mut at = 0;
    while at < data.len() {
        let end = memchr::memchr(b'\n', &data[at..]).map_or(data.len(), |k| at + k + 1);
        let (res, _, _, n) = rd.read_record(&data[at..end], &mut out, &mut ends);
        assert!(matches!(res, csv_core::ReadRecordResult::Record), "{res:?}");
        let mut start = 0;
        for &e in &ends[..n] {
            sum += e - start;
            start = e;
        }
        at = end;
    }
    sum
}

/// csv-core over the whole buffer (its own record splitting).
fn core_stream(data: &[u8]) -> usize {
    let mut rd = csv_core::Reader::new();
    let (mut out, mut ends) = (vec![0u8; 1 << 16], vec![0usize; 64]);
    let mut sum = 0;
    let mut input = data;
    loop {
        let (res, nin, _, n) = rd.read_record(input, &mut out, &mut ends);
        input = &input[nin..];
        match res {
            csv_core::ReadRecordResult::Record => {
                let mut start = 0;
                for &e in &ends[..n] {
                    sum += e - start;
                    start = e;
                }
            }
            csv_core::ReadRecordResult::InputEmpty => {}
            csv_core::ReadRecordResult::End => return sum,
            other => panic!("{other:?}"),
        }
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().expect("usage: csv_split FILE [--runs N]");
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let data = std::fs::read(path)?;
    let mb = data.len() as f64 / 1e6;
    let ways: [(&str, Split); 3] = [
        ("mctrace::csv", ours),
        ("csv-core per line", core_per_line),
        ("csv-core stream", core_stream),
    ];
    let mut best = [f64::MAX; 3];
    let mut sums = [0; 3];
    // Alternate the ways run by run, so a busy neighbour hits all of them.
    for _ in 0..runs {
        for (k, (_, f)) in ways.iter().enumerate() {
            let t = Instant::now();
            sums[k] = std::hint::black_box(f(std::hint::black_box(&data)));
            best[k] = best[k].min(t.elapsed().as_secs_f64());
        }
    }
    println!("{path}: {mb:.0} MB, best of {runs}");
    for (k, (name, _)) in ways.iter().enumerate() {
        println!(
            "  {name:<18} {:>6.0} MB/s  (field bytes {})",
            mb / best[k],
            sums[k]
        );
    }
    Ok(())
}
