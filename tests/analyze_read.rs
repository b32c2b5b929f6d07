//! mc-analyze's row reading: `ReadRow::parse` (the ids decoded as the
//! scan walks them) reads every line as `Record::parse` then
//! `ReadRow::read` do, to the same row, ids and error message.

use mctrace::analyze::ReadRow;
use mctrace::record::Record;
use proptest::prelude::*;

use crate::util::{run_ok, run_ok_both};

/// The row, ids and error of both ways of reading `line`, compared.
fn same_reading(line: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(line);
    let mut fused_ids = vec![9, 9];
    let fused = ReadRow::parse(line, &mut fused_ids);
    let mut ids = vec![8];
    let reference = Record::parse(line).and_then(|rec| ReadRow::read(&rec, &mut ids));
    match (fused, reference) {
        (Ok(a), Ok(b)) if format!("{a:?}") == format!("{b:?}") && fused_ids == ids => Ok(()),
        (Err(a), Err(b)) if a.to_string() == b.to_string() => Ok(()),
        (a, b) => Err(format!("{a:?} {fused_ids:?} against {b:?} {ids:?}: {text}")),
    }
}

/// Rows as the traces write them and rows the reading refuses: every
/// known field, agent fields, ids over 2^63 - 1 (which mc-analyze
/// refuses) and over u64, `null`s, and each row with every byte changed.
#[test]
fn rows_read_in_one_pass_are_the_rows_read_in_two() {
    let rows = [
        r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2353]}"#,
        r#"{"timestamp": 1.5, "session_id": "a", "delay": 20, "input_length": 10, "output_length": 1, "hash_ids": [0, 1]}"#,
        r#"{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [9223372036854775808, 1]}"#,
        r#"{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [18446744073709551616]}"#,
        r#"{"timestamp": 1, "input_length": -10, "output_length": 1, "hash_ids": [1, -2]}"#,
        r#"{"timestamp": 1, "input_length": 10, "hash_ids": null, "request_id": "r1", "wait_for": ["r0"]}"#,
        r#"{"hash_ids": [12345678, 99999999, 0, 7], "session_id": 5, "output_length": null}"#,
        r#"{"timestamp":0,"input_length":1200,"output_length":52,"hash_ids":[0,1,2]}"#,
    ];
    for row in rows {
        let line = row.as_bytes();
        same_reading(line).unwrap();
        for at in 0..line.len() {
            for &c in b"{}[]\",:019-.e tn\\x\xc3" {
                let mut b = line.to_vec();
                b[at] = c;
                same_reading(&b).unwrap();
            }
            let mut b = line.to_vec();
            b.remove(at);
            same_reading(&b).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Generated rows: arrays of any length anywhere in the line (windows
    /// end anywhere), ids short and long, other fields before and after.
    #[test]
    fn generated_rows_read_in_one_pass_as_in_two(
        ids in prop::collection::vec(prop_oneof![
            0u64..1000, 0u64..100_000_000, Just(1u64 << 63), 0u64..u64::MAX], 0..70),
        pad in 0usize..70,
        compact in any::<bool>(),
        session in prop_oneof![Just(""), Just(r#""session_id": "s", "#), Just(r#""session_id": [1], "#)],
    ) {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        let line = format!(
            r#"{{"timestamp": 5, "p": "{}", {session}"input_length": 7, "hash_ids": [{}]}}"#,
            "x".repeat(pad),
            ids.join(if compact { "," } else { ", " })
        );
        let checked = same_reading(line.as_bytes());
        prop_assert!(checked.is_ok(), "{}", checked.unwrap_err());
    }
}

/// The one-thread reader (`--line-buffered`, `--pass`), which reads lines
/// in the plain form where they lie in its read buffer, reports what the
/// reader on every core reports (each line cut first, then parsed): on a
/// trace with a BOM, `\r\n` endings, blank lines, lines not in the plain
/// form, bad lines, lines at and over `--max-line-bytes` (a `\r` counts),
/// and a last line without its `\n`.
#[test]
fn the_one_thread_reader_reports_what_the_cut_lines_give() {
    let plain = |k: usize| {
        let ids: Vec<String> = (0..k % 40 + 1)
            .map(|i| (i * 7 + k % 5).to_string())
            .collect();
        format!(
            r#"{{"timestamp": {}, "input_length": {}, "output_length": 9, "hash_ids": [{}]}}"#,
            k * 10,
            (k % 40 + 1) * 512,
            ids.join(", ")
        )
    };
    // Line 90 ends in `\r\n` and is read in the buffer (the last line
    // not in the plain form is 13, and the 64 after it are read the
    // reader's way): the limit at its length refuses it, as the reader does.
    let limit = plain(90).len();
    let mut text = String::from("\u{feff}");
    for k in 0..400 {
        let line = match k % 100 {
            // Not the plain form: the general scan's, and the 64 lines after.
            5 => plain(k).replace(": ", " : "),
            7 => String::new(),
            11 => plain(k).replace("hash_ids\": [", "hash_ids\": [-"),
            13 => plain(k).replace('}', ", \"x\": [1, {\"y\": null}]}"),
            _ => plain(k),
        };
        text.push_str(&line);
        text.push_str(if k % 3 == 0 { "\r\n" } else { "\n" });
    }
    text.push_str(&plain(1));
    let reports = |limit: usize| {
        let limit = limit.to_string();
        let args = ["--json", "--on-error", "skip", "--max-line-bytes", &limit];
        let cut = run_ok("mc-analyze", &args, &text);
        let one = run_ok(
            "mc-analyze",
            &[&args[..], &["--line-buffered"]].concat(),
            &text,
        );
        let (_, pass) = run_ok_both("mc-analyze", &[&args[..], &["--pass"]].concat(), &text);
        (cut, one, pass)
    };
    for limit in [1 << 20, limit, limit + 1, limit - 1] {
        let (cut, one, pass) = reports(limit);
        assert_eq!(one, cut, "--max-line-bytes {limit}");
        assert_eq!(pass, cut, "--max-line-bytes {limit}");
    }
}
