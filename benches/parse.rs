//! Parsing a Mooncake line: our scanner (`src/record/`) next to the other
//! ways a Rust tool could read it, each in its fastest form we know:
//! simd-json's tape (no DOM), its borrowed DOM and its serde path, and
//! serde_json typed, with the ids skipped (`IgnoredAny`) or kept as a span
//! (`RawValue`, what a rewrite-one-field tool needs). Buffers are reused.
//! Two tasks: "validate + timestamp" (what mc-scale needs of most lines) and
//! "+ decode hash_ids" (what mc-roots and mc-analyze need).
//! Run with `cargo bench --bench parse --features bench-parse`; prints MB/s for each.

use std::hint::black_box;
use std::time::Instant;

use mctrace::record::{Field, Record};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use simd_json::prelude::*;

/// The whole row, typed.
#[derive(Deserialize)]
struct Row {
    timestamp: f64,
    #[allow(dead_code)]
    input_length: u64,
    #[allow(dead_code)]
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// The timestamp; `hash_ids` validated and skipped.
#[derive(Deserialize)]
struct Skipping {
    timestamp: f64,
    #[allow(dead_code)]
    hash_ids: IgnoredAny,
}

/// The timestamp; `hash_ids` kept as its span of the line.
#[derive(Deserialize)]
struct Spanned<'a> {
    timestamp: f64,
    #[serde(borrow)]
    hash_ids: &'a RawValue,
}

/// About 64 MB of lines shaped like the Mooncake conversation trace.
fn lines() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut total = 0;
    let mut next = 1u64;
    let mut x = 0x1234_5678u64;
    while total < 64 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = 2 + x % 46;
        let ids: Vec<String> = std::iter::once(0)
            .chain(next..next + n)
            .map(|i| i.to_string())
            .collect();
        next += n;
        let line = format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}]}}",
            total / 300,
            n * 512 + 100,
            x % 700,
            ids.join(", ")
        );
        total += line.len() + 1;
        out.push(line.into_bytes());
    }
    out
}

fn bench(name: &str, lines: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> u64) {
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut acc = 0u64;
        for l in lines {
            acc = acc.wrapping_add(f(l));
        }
        black_box(acc);
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("{name:<52} {:>7.0} MB/s", bytes as f64 / 1048576.0 / best);
}

fn main() {
    let lines = lines();
    let mut ids = Vec::new();
    println!("validate + timestamp");
    bench("  scanner (ours)", &lines, |l| {
        let r = Record::parse(l).unwrap();
        r.number(Field::Timestamp).unwrap().unwrap().as_f64() as u64
    });
    let mut buf = Vec::new();
    let mut buffers = simd_json::Buffers::default();
    let mut spare = Some(simd_json::tape::Tape::null().reset());
    bench("  simd-json tape", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let mut tape = spare.take().unwrap().reset();
        simd_json::fill_tape(&mut buf, &mut buffers, &mut tape).unwrap();
        let t = tape.as_value().get("timestamp").and_then(|t| t.cast_f64());
        spare = Some(tape.reset());
        t.unwrap() as u64
    });
    bench("  simd-json borrowed value", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let v = simd_json::to_borrowed_value_with_buffers(&mut buf, &mut buffers).unwrap();
        v.get("timestamp").and_then(|t| t.cast_f64()).unwrap() as u64
    });
    bench("  serde_json typed, hash_ids IgnoredAny", &lines, |l| {
        serde_json::from_slice::<Skipping>(l).unwrap().timestamp as u64
    });
    bench("  serde_json typed, hash_ids RawValue span", &lines, |l| {
        let r = serde_json::from_slice::<Spanned<'_>>(l).unwrap();
        r.timestamp as u64 + r.hash_ids.get().len() as u64
    });

    println!("validate + timestamp + decode hash_ids");
    bench("  scanner (ours)", &lines, |l| {
        let r = Record::parse(l).unwrap();
        r.hash_ids_into(&mut ids).unwrap();
        r.number(Field::Timestamp).unwrap().unwrap().as_f64() as u64 + ids.len() as u64
    });
    bench("  simd-json tape", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let mut tape = spare.take().unwrap().reset();
        simd_json::fill_tape(&mut buf, &mut buffers, &mut tape).unwrap();
        let v = tape.as_value();
        ids.clear();
        if let Some(a) = v.get("hash_ids").and_then(|h| h.as_array()) {
            ids.extend(a.iter().filter_map(|x| x.as_u64()));
        }
        let t = v.get("timestamp").and_then(|t| t.cast_f64());
        spare = Some(tape.reset());
        t.unwrap() as u64 + ids.len() as u64
    });
    bench("  simd-json borrowed value", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let v = simd_json::to_borrowed_value_with_buffers(&mut buf, &mut buffers).unwrap();
        ids.clear();
        if let Some(a) = v.get("hash_ids").and_then(|h| h.as_array()) {
            ids.extend(a.iter().filter_map(|x| x.as_u64()));
        }
        v.get("timestamp").and_then(|t| t.cast_f64()).unwrap() as u64 + ids.len() as u64
    });
    bench("  simd-json serde typed", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let r: Row = simd_json::serde::from_slice_with_buffers(&mut buf, &mut buffers).unwrap();
        r.timestamp as u64 + r.hash_ids.len() as u64
    });
    bench("  serde_json typed", &lines, |l| {
        let r: Row = serde_json::from_slice(l).unwrap();
        r.timestamp as u64 + r.hash_ids.len() as u64
    });
}
