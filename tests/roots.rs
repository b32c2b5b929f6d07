//! mc-roots: sessions stay in one tree, trees share nothing, K = 1 is the identity.

use std::collections::HashMap;

use crate::util::{ids, run_ok, tool};

fn roots(args: &[&str], input: &str) -> Vec<serde_json::Value> {
    run_ok("mc-roots", args, input)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// 40 sessions of 3 turns, every turn extending the same system prompt [0, 1].
fn sessions() -> String {
    let mut s = String::new();
    for sess in 0..40 {
        for turn in 0..3u64 {
            let own: Vec<String> = (0..=turn)
                .map(|t| (100 + sess * 10 + t).to_string())
                .collect();
            s.push_str(&format!(
                "{{\"session_id\": \"s{sess}\", \"input_length\": {}, \"hash_ids\": [0, 1, {}]}}\n",
                (3 + turn) * 512,
                own.join(", ")
            ));
        }
    }
    s
}

#[test]
fn one_root_is_the_identity() {
    let input = sessions();
    tool("mc-roots")
        .write_stdin(input.clone())
        .assert()
        .code(0)
        .stdout(input.clone());
    tool("mc-roots")
        .args(["--roots", "1", "--seed", "9"])
        .write_stdin(input.clone())
        .assert()
        .stdout(input);
}

#[test]
fn every_session_lands_in_one_tree_and_trees_share_nothing() {
    let k = 4;
    let rows = roots(&["--roots", "4", "--seed", "3"], &sessions());
    assert_eq!(rows.len(), 120);
    let mut tree_of_session: HashMap<String, u64> = HashMap::new();
    let mut trees_used = std::collections::BTreeSet::new();
    for (i, row) in rows.iter().enumerate() {
        let sess = row["session_id"].as_str().unwrap().to_string();
        let got = ids(row);
        let t = got[0] % k;
        // Every id of the row is in the same tree and decodes to the input id.
        let sess_no: u64 = sess[1..].parse().unwrap();
        let turn = (i % 3) as u64;
        let mut want: Vec<u64> = vec![0, 1];
        want.extend((0..=turn).map(|x| 100 + sess_no * 10 + x));
        assert_eq!(got, want.iter().map(|h| h * k + t).collect::<Vec<_>>());
        assert_eq!(
            *tree_of_session.entry(sess).or_insert(t),
            t,
            "session split across trees"
        );
        trees_used.insert(t);
    }
    // 40 sessions over 4 trees: all trees are used, so the shared system
    // prompt now has 4 distinct roots (0*4 + t for each t).
    assert_eq!(trees_used.len(), 4);
}

#[test]
fn same_seed_same_bytes_other_seed_other_assignment() {
    let input = sessions();
    let a = tool("mc-roots")
        .args(["--roots", "8", "--seed", "1"])
        .write_stdin(input.clone())
        .output()
        .unwrap()
        .stdout;
    let b = tool("mc-roots")
        .args(["--roots", "8", "--seed", "1"])
        .write_stdin(input.clone())
        .output()
        .unwrap()
        .stdout;
    let c = tool("mc-roots")
        .args(["--roots", "8", "--seed", "2"])
        .write_stdin(input)
        .output()
        .unwrap()
        .stdout;
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn rows_without_session_or_ids() {
    // No session: each row is its own unit. No ids: unchanged bytes.
    let input =
        "{\"hash_ids\":[5,6]}\n{\"input_length\": 3}\n{\"session_id\": 7, \"hash_ids\": []}\n";
    let out = tool("mc-roots")
        .args(["--roots", "3"])
        .write_stdin(input)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let row: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let got = ids(&row);
    let t = got[0] % 3;
    assert_eq!(got, vec![5 * 3 + t, 6 * 3 + t]);
    // Compact input arrays stay compact.
    assert!(lines[0].starts_with("{\"hash_ids\":["));
    assert!(!lines[0].contains(", "));
    assert_eq!(lines[1], "{\"input_length\": 3}");
    assert_eq!(lines[2], "{\"session_id\": 7, \"hash_ids\": []}");
}

#[test]
fn overflowing_ids_are_an_error() {
    tool("mc-roots")
        .args(["--roots", "2"])
        .write_stdin(format!("{{\"hash_ids\": [{}]}}\n", u64::MAX / 2 + 1))
        .assert()
        .code(65)
        .stderr(predicates::str::contains(
            "line 1: field `hash_ids`: id 9223372036854775808 times --roots 2 overflows 64 bits",
        ));
}
