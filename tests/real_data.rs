//! The transforms on the real FAST25 Mooncake traces (needs `MCTRACE_DATA`).

use crate::util::{data_dir, tool};

const TRACES: [&str; 2] = ["conversation_trace.jsonl", "synthetic_trace.jsonl"];

#[test]
fn identities_hold_byte_for_byte_on_real_traces() {
    let Some(data) = data_dir("identities_hold_byte_for_byte_on_real_traces") else {
        return;
    };
    for name in TRACES {
        let path = data.join("mooncake").join(name);
        let bytes = std::fs::read(&path).unwrap();
        for (t, args) in [
            ("mc-scale", vec![]),
            ("mc-roots", vec!["--roots", "1"]),
            ("mc-cap", vec![]),
        ] {
            let out = tool(t)
                .args(&args)
                .arg("--input")
                .arg(&path)
                .output()
                .unwrap();
            assert!(out.status.success(), "{t} on {name}");
            assert!(out.stdout == bytes, "{t} changed {name}");
        }
    }
}

#[test]
fn multipliers_run_on_real_traces_and_keep_every_row_consistent() {
    let Some(data) = data_dir("multipliers_run_on_real_traces_and_keep_every_row_consistent")
    else {
        return;
    };
    for name in TRACES {
        let path = data.join("mooncake").join(name);
        let rows_in = std::fs::read_to_string(&path).unwrap().lines().count();
        let out = tool("mc-scale")
            .args([
                "--prefix-len-multiplier",
                "2",
                "--prompt-len-multiplier",
                "0.5",
                "--input",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut rows = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let n = v["hash_ids"].as_array().unwrap().len() as u64;
            let len = v["input_length"].as_u64().unwrap();
            assert!(
                (n - 1) * 512 < len && len <= n * 512,
                "{name}: inconsistent row {line}"
            );
            rows += 1;
        }
        assert_eq!(rows, rows_in, "{name}");
    }
}

#[test]
fn caps_and_roots_keep_real_rows_consistent() {
    let Some(data) = data_dir("caps_and_roots_keep_real_rows_consistent") else {
        return;
    };
    let path = data.join("mooncake").join("conversation_trace.jsonl");
    let capped = tool("mc-cap")
        .args(["--max-isl", "3000", "--input"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(capped.status.success());
    let rooted = tool("mc-roots")
        .args(["--roots", "4"])
        .write_stdin(capped.stdout)
        .output()
        .unwrap();
    assert!(rooted.status.success());
    for line in String::from_utf8(rooted.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let n = v["hash_ids"].as_array().unwrap().len() as u64;
        let len = v["input_length"].as_u64().unwrap();
        assert!(
            len <= 3000 && (n - 1) * 512 < len && len <= n * 512,
            "{line}"
        );
    }
}
