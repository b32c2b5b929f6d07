//! Parsing a Mooncake line: our scanner (`record.rs`) next to simd-json on a
//! reused buffer, the two choices the streaming-core issue asked to measure.
//! Run with `cargo bench --bench parse`; prints MB/s for each.

use std::hint::black_box;
use std::time::Instant;

use mctrace::record::{Field, Record};
use simd_json::prelude::*;

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
    bench("scanner: validate + timestamp", &lines, |l| {
        let r = Record::parse(l).unwrap();
        r.number(Field::Timestamp).unwrap().unwrap().as_f64() as u64
    });
    bench(
        "scanner: validate + timestamp + decode hash_ids",
        &lines,
        |l| {
            let r = Record::parse(l).unwrap();
            r.hash_ids_into(&mut ids).unwrap();
            r.number(Field::Timestamp).unwrap().unwrap().as_f64() as u64 + ids.len() as u64
        },
    );
    let mut buf = Vec::new();
    let mut buffers = simd_json::Buffers::default();
    bench("simd-json borrowed value + timestamp", &lines, |l| {
        buf.clear();
        buf.extend_from_slice(l);
        let v = simd_json::to_borrowed_value_with_buffers(&mut buf, &mut buffers).unwrap();
        v.get("timestamp").and_then(|t| t.cast_f64()).unwrap() as u64
    });
    let mut buf = Vec::new();
    let mut buffers = simd_json::Buffers::default();
    bench(
        "simd-json borrowed value + timestamp + hash_ids",
        &lines,
        |l| {
            buf.clear();
            buf.extend_from_slice(l);
            let v = simd_json::to_borrowed_value_with_buffers(&mut buf, &mut buffers).unwrap();
            ids.clear();
            if let Some(a) = v.get("hash_ids").and_then(|h| h.as_array()) {
                ids.extend(a.iter().filter_map(|x| x.as_u64()));
            }
            v.get("timestamp").and_then(|t| t.cast_f64()).unwrap() as u64 + ids.len() as u64
        },
    );
}
