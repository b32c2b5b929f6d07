//! Writes a deterministic synthetic trace shaped like the FAST25 Mooncake
//! conversation trace (about 24 ids and 12k tokens a row, every row sharing
//! id 0, about a third of rows continuing an earlier conversation), for
//! benchmarks and the sample in `examples/sample.jsonl`.
//!
//! cargo run --release --example gen_trace -- --rows 40 --seed 7 --sessions > sample.jsonl
//! cargo run --release --example gen_trace -- --bytes 1G > big.jsonl

mod common;

use common::{parse_size, Rng};
use std::io::{self, BufWriter, Write};

const B: u64 = 512;

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let sessions = args.iter().any(|a| a == "--sessions");
    let rows: u64 = value("--rows")
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    let bytes = value("--bytes").map_or(u64::MAX, |s| parse_size(s));
    let rows = if rows == u64::MAX && bytes == u64::MAX {
        1000
    } else {
        rows
    };
    let seed: u64 = value("--seed").and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let out = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, out.lock());
    // Open conversations: (session number, ids so far, length so far).
    let mut open: Vec<(u64, Vec<u64>, u64)> = Vec::new();
    let mut next_id = 1u64;
    let mut next_session = 0u64;
    let mut ts = 0u64;
    let mut written = 0u64;
    let mut line = Vec::with_capacity(4096);
    let mut n = 0;
    while n < rows && written < bytes {
        n += 1;
        ts += rng.below(600);
        let cont = !open.is_empty() && rng.below(3) == 0;
        let (session, mut ids, base_len) = if cont {
            let k = rng.below(open.len() as u64) as usize;
            open.swap_remove(k)
        } else {
            let s = next_session;
            next_session += 1;
            (s, vec![0], B)
        };
        // Keep only full blocks of the earlier turn, then add new blocks.
        let full = (base_len / B) as usize;
        ids.truncate(full.max(1));
        let grow = 1 + rng.below(if cont { 8 } else { 40 });
        for _ in 0..grow {
            ids.push(next_id);
            next_id += 1;
        }
        let len = (ids.len() as u64 - 1) * B + 1 + rng.below(B);
        let osl = 1 + rng.below(700);
        line.clear();
        if sessions {
            write!(line, "{{\"session_id\": \"s{session}\", ")?;
        } else {
            line.push(b'{');
        }
        write!(line, "\"timestamp\": {ts}, \"input_length\": {len}, \"output_length\": {osl}, \"hash_ids\": [")?;
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                line.extend_from_slice(b", ");
            }
            write!(line, "{id}")?;
        }
        line.extend_from_slice(b"]}\n");
        out.write_all(&line)?;
        written += line.len() as u64;
        // Conversations end after a while, as real ones do, so rows stay
        // near the real trace's mean of 24 ids.
        if open.len() < 64 && ids.len() < 48 {
            open.push((session, ids, len));
        }
    }
    out.flush()
}
