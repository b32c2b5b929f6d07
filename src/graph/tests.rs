//! The checks, the dependency structure, the release rule and the
//! equivalence of plain sessions and chains; expected values worked out
//! by hand in the comments.

use super::*;

fn graphs(text: &str) -> Graphs {
    Graphs::from_lines(text).unwrap()
}

/// Pushes `text`'s lines (numbered from 1) into `b`.
fn push_lines(b: &mut Builder, text: &str) {
    for (i, line) in text.lines().enumerate() {
        b.push_record(i as u64 + 1, &Record::parse(line.as_bytes()).unwrap())
            .unwrap();
    }
}

/// The problems of `text` as `(line, kind, message)`.
fn problems(text: &str) -> Vec<(u64, ProblemKind, String)> {
    let mut b = Builder::new();
    push_lines(&mut b, text);
    let (_, p) = b.finish();
    p.first
        .into_iter()
        .map(|p| (p.line, p.kind, p.err.to_string()))
        .collect()
}

/// The error a tool exits with, as printed.
fn error(text: &str) -> String {
    Graphs::from_lines(text).unwrap_err().to_string()
}

const FAN: &str = r#"{"session_id": "s", "timestamp": 100, "request_id": "root", "branches": ["b"]}
{"session_id": "s", "request_id": "a", "wait_for": ["root"], "delay": 10}
{"session_id": "s", "request_id": "b", "delay": 20, "tool_wait_ms": 5}
{"session_id": "s", "request_id": "join", "wait_for": ["a", "b"], "delay": 1}
{"session_id": "s", "wait_for": ["join"], "prefix_reset": true}
"#;

#[test]
fn edges_from_wait_for_and_branches_are_row_indices() {
    let g = graphs(FAN);
    assert_eq!(g.len(), 5);
    assert!((0..5).all(|r| g.kind(r) == RowKind::Call));
    assert_eq!(g.deps(0), &[] as &[u32]);
    assert_eq!(g.deps(1), &[0]);
    // `b` is spawned by root's branches: the inverse edge.
    assert_eq!(g.deps(2), &[0]);
    assert_eq!(g.deps(3), &[1, 2]);
    assert_eq!(g.deps(4), &[3]);
    assert_eq!(g.dependents(0), &[1, 2]);
    assert_eq!(g.dependents(3), &[4]);
    assert_eq!(g.order(), &[0, 1, 2, 3, 4]);
    assert_eq!(g.request_id(4), None);
    assert_eq!(g.line(3), 4);
}

#[test]
fn the_release_rule_by_hand() {
    let g = graphs(FAN);
    // Every call takes 50 ms. root: its timestamp 100, ends 150.
    // a: 150 + 10 = 160, ends 210. b: 150 + 20 + 5 = 175, ends 225.
    // join: max(210, 225) + 1 = 226, ends 276. last: 276 + 0, ends 326.
    let t = g.schedule(|_| 50.0);
    assert_eq!(
        t,
        vec![
            (100.0, 150.0),
            (160.0, 210.0),
            (175.0, 225.0),
            (226.0, 276.0),
            (276.0, 326.0)
        ]
    );
    assert_eq!(g.release_ms(3, |d| [0.0, 7.0, 9.0, 0.0, 0.0][d]), 10.0);
}

#[test]
fn a_root_without_timestamp_counts_from_its_sessions_first_timestamp() {
    let g = graphs(
        r#"{"session_id": 1, "request_id": "x", "delay": 30, "tool_wait_ms": 2}
{"session_id": 1, "request_id": "y", "timestamp": 500}
{"session_id": 2, "request_id": "z", "delay": 4}
{"timestamp": 1000}
"#,
    );
    // x: session 1's first timestamp is 500 (line 2): 500 + 30 + 2.
    assert_eq!(g.release_ms(0, |_| f64::NAN), 532.0);
    assert_eq!(g.release_ms(1, |_| f64::NAN), 500.0);
    // z: session 2 has none, the trace's first is 500: 500 + 4.
    assert_eq!(g.release_ms(2, |_| f64::NAN), 504.0);
    assert_eq!(g.kind(3), RowKind::Single);
    assert_eq!(g.release_ms(3, |_| f64::NAN), 1000.0);
    // A timestamped root's gap is not added.
    assert_eq!(g.gap_ms(1), 0.0);
    assert_eq!(g.gap_ms(0), 32.0);
}

#[test]
fn a_plain_session_is_the_chain_of_its_turns() {
    let plain = r#"{"session_id": "c", "timestamp": 0, "input_length": 1}
{"session_id": "d", "timestamp": 40, "input_length": 1}
{"session_id": "c", "delay": 100, "input_length": 1}
{"timestamp": 5, "input_length": 1}
{"session_id": "c", "delay": 7.5, "tool_wait_ms": 3, "input_length": 1}
{"session_id": "d", "delay": 0, "input_length": 1}
"#;
    let chain = r#"{"session_id": "c", "timestamp": 0, "input_length": 1, "request_id": "c1"}
{"session_id": "d", "timestamp": 40, "input_length": 1, "request_id": "d1"}
{"session_id": "c", "delay": 100, "input_length": 1, "request_id": "c2", "wait_for": ["c1"]}
{"timestamp": 5, "input_length": 1}
{"session_id": "c", "delay": 7.5, "tool_wait_ms": 3, "input_length": 1, "request_id": "c3", "wait_for": ["c2"]}
{"session_id": "d", "delay": 0, "input_length": 1, "request_id": "d2", "wait_for": ["d1"]}
"#;
    let (p, c) = (graphs(plain), graphs(chain));
    assert_eq!(p.kind(0), RowKind::Turn);
    assert_eq!(c.kind(0), RowKind::Call);
    for r in 0..6 {
        assert_eq!(p.deps(r), c.deps(r), "row {r}");
    }
    // Durations that differ per row, so a wrong dependency shows.
    let d = |r: usize| 10.0 * (r as f64 + 1.0);
    let (tp, tc) = (p.schedule(d), c.schedule(d));
    assert_eq!(tp, tc);
    // By hand: c1 0..10, c2 10+100=110..140, c3 140+7.5+3=150.5..200.5;
    // d1 40..60, d2 60..120.
    assert_eq!(tp[4], (150.5, 200.5));
    assert_eq!(tp[5], (60.0, 120.0));
}

#[test]
fn a_session_with_an_id_drops_the_turn_rule() {
    // Two calls of a graph session without edges between them run
    // together: the second does not wait for the first.
    let g = graphs(
        r#"{"session_id": "s", "timestamp": 0, "request_id": "a"}
{"session_id": "s", "timestamp": 0, "delay": 5}
"#,
    );
    assert_eq!(g.kind(1), RowKind::Call);
    assert!(g.deps(1).is_empty());
}

#[test]
fn an_unknown_id_names_the_line_the_field_and_the_fix() {
    let text = r#"{"session_id": "s", "request_id": "a"}
{"session_id": "s", "request_id": "b", "wait_for": ["a", "nope"]}
{"session_id": "s", "request_id": "c", "branches": ["gone"]}
"#;
    assert_eq!(
        problems(text),
        vec![
            (
                2,
                ProblemKind::UnknownId,
                "field `wait_for`: no row has request_id `nope`: add the call, or remove the id from wait_for".into()
            ),
            (
                3,
                ProblemKind::UnknownId,
                "field `branches`: no row has request_id `gone`: add the call, or remove the id from branches".into()
            ),
        ]
    );
    assert!(error(text).starts_with("line 2: field `wait_for`: no row has request_id `nope`"));
}

#[test]
fn a_duplicate_id_names_the_first_line() {
    let text = r#"{"session_id": "s", "request_id": "a"}
{"session_id": "t", "request_id": "b"}
{"session_id": "t", "request_id": "a"}
"#;
    assert_eq!(
        error(text),
        "line 3: field `request_id`: `a` is also the id of line 1: give each call its own id"
    );
}

#[test]
fn a_cycle_names_its_ids_in_running_order() {
    let text = r#"{"session_id": "s", "request_id": "root"}
{"session_id": "s", "request_id": "a", "wait_for": ["root", "c"]}
{"session_id": "s", "request_id": "b", "wait_for": ["a"]}
{"session_id": "s", "request_id": "c", "wait_for": ["b"]}
{"session_id": "s", "request_id": "after", "wait_for": ["c"]}
"#;
    let p = problems(text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, 2);
    assert_eq!(p[0].1, ProblemKind::Cycle);
    assert_eq!(
        p[0].2,
        "fields `wait_for`/`branches`: the calls `a` → `b` → `c` → `a` wait for each other \
         (a cycle, lines 2, 3, 4): remove one of these edges"
    );
    // A call that waits for itself, through branches.
    let p = problems(r#"{"session_id": "s", "request_id": "x", "branches": ["x"]}"#);
    assert_eq!(p.len(), 1);
    assert!(p[0].2.contains("the calls `x` → `x`"), "{}", p[0].2);
    // The graph still comes back for a report: the cycle and what follows
    // it left out of the order.
    let mut b = Builder::new();
    push_lines(&mut b, text);
    let (g, _) = b.finish();
    assert_eq!(g.order(), &[0]);
}

#[test]
fn two_cycles_are_two_problems() {
    let text = r#"{"session_id": "s", "request_id": "a", "wait_for": ["b"]}
{"session_id": "s", "request_id": "b", "wait_for": ["a"]}
{"session_id": "t", "request_id": "c", "wait_for": ["d"]}
{"session_id": "t", "request_id": "d", "wait_for": ["c"]}
"#;
    let p = problems(text);
    let lines: Vec<u64> = p.iter().map(|p| p.0).collect();
    assert_eq!(lines, vec![1, 3]);
}

#[test]
fn an_edge_to_another_session_is_refused() {
    let text = r#"{"session_id": "s", "request_id": "a"}
{"session_id": "t", "request_id": "b", "wait_for": ["a"]}
{"request_id": "c", "wait_for": ["a"]}
"#;
    let p = problems(text);
    assert_eq!(p.len(), 2);
    assert_eq!(
        p[0],
        (
            2,
            ProblemKind::OtherSession,
            "field `wait_for`: `a` (line 1) is a call of session \"s\", this row of session \"t\": \
             a call waits only for calls of its own session; give both the same session_id, \
             or remove the id from wait_for"
                .into()
        )
    );
    assert!(p[1].2.contains("this row of no session"), "{}", p[1].2);
}

#[test]
fn a_negative_delay_in_a_graph_is_refused_but_not_in_a_plain_session() {
    let text = r#"{"session_id": "s", "request_id": "a"}
{"session_id": "s", "request_id": "b", "wait_for": ["a"], "delay": -1}
{"session_id": "p", "timestamp": 0}
{"session_id": "p", "delay": -1}
"#;
    let p = problems(text);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, 2);
    assert_eq!(p[0].1, ProblemKind::NegativeDelay);
    assert!(p[0].2.starts_with("field `delay`: -1 ms"), "{}", p[0].2);
}

#[test]
fn per_row_type_errors_come_back_from_push() {
    let mut b = Builder::new();
    let rec = Record::parse(br#"{"session_id": "s", "wait_for": "a"}"#).unwrap();
    let e = b.push_record(1, &rec).unwrap_err();
    assert!(e.to_string().starts_with("field `wait_for`"), "{e}");
    let rec = Record::parse(br#"{"session_id": "s", "tool_wait_ms": -3}"#).unwrap();
    assert!(b.push_record(2, &rec).is_err());
}

#[test]
fn problems_keep_counts_past_the_messages_kept() {
    let mut text = String::new();
    for i in 0..(Problems::KEPT + 20) {
        text.push_str(&format!(
            "{{\"session_id\": \"s\", \"request_id\": \"r{i}\", \"wait_for\": [\"missing\"]}}\n"
        ));
    }
    let mut b = Builder::new();
    push_lines(&mut b, &text);
    let (_, p) = b.finish();
    assert_eq!(p.first.len(), Problems::KEPT);
    // The earliest problem is the error, whatever was kept.
    assert!(p
        .first_error()
        .unwrap()
        .to_string()
        .starts_with("line 1: field `wait_for`"));
    assert_eq!(p.counts[&ProblemKind::UnknownId].count, 120);
    assert_eq!(
        p.counts[&ProblemKind::UnknownId].first_lines,
        vec![1, 2, 3, 4, 5]
    );
}

#[test]
fn task_facts_by_hand() {
    let g = graphs(FAN);
    let t = g.tasks(|_| 0.0);
    assert_eq!(t.len(), 1);
    let f = &t[0];
    assert_eq!(f.calls, 5);
    assert_eq!(f.roots, 1);
    // root spawns a and b.
    assert_eq!(f.max_fan_out, 2);
    // root → a|b → join → last.
    assert_eq!(f.depth, 4);
    // a and b at depth 2.
    assert_eq!(f.widest, 2);
    // Gaps: root 0 (timestamped), a 10, b 25, join 1, last 0: total 36;
    // the longest chain root → b → join → last is 26.
    assert_eq!(f.total_ms, 36.0);
    assert_eq!(f.critical_path_ms, 26.0);
    assert_eq!(f.critical_share(), Some(26.0 / 36.0));
    assert_eq!(f.think_ms, 31.0);
    assert_eq!(f.tool_ms, 5.0);
    // With every call taking 50 ms: a and b overlap from 175 to 210.
    let times = g.schedule(|_| 50.0);
    assert_eq!(Graphs::peak_in_flight(&[0, 1, 2, 3, 4], &times), 2);
    let t = g.tasks(|_| 50.0);
    // root → b → join → last: 26 + 4 × 50.
    assert_eq!(t[0].critical_path_ms, 226.0);
    // A plain session is no task.
    assert!(graphs("{\"session_id\": 1, \"timestamp\": 0}\n")
        .tasks(|_| 0.0)
        .is_empty());
}

#[test]
fn rows_without_session_are_one_session_among_themselves() {
    let text = r#"{"request_id": "a", "timestamp": 0}
{"request_id": "b", "wait_for": ["a"], "delay": 5}
{"session_id": "s", "request_id": "c", "timestamp": 0}
{"request_id": "d", "wait_for": ["c"]}
{"session_id": "s", "request_id": "e", "wait_for": ["a"]}
{"timestamp": 3}
"#;
    // b → a passes; d → c and e → a cross sessions.
    let mut b = Builder::new();
    push_lines(&mut b, text);
    let (g, p) = b.finish();
    let lines: Vec<(u64, ProblemKind)> = p.first.iter().map(|p| (p.line, p.kind)).collect();
    assert_eq!(
        lines,
        vec![
            (4, ProblemKind::OtherSession),
            (5, ProblemKind::OtherSession)
        ]
    );
    assert!(p.first[0]
        .err
        .to_string()
        .contains("`c` (line 3) is a call of session \"s\", this row of no session"));
    assert_eq!(g.deps(1), &[0]);
    // a 0..10, b after a's end + 5: the release rule over the edge.
    assert_eq!(g.release_ms(1, |_| 10.0), 15.0);
    // Rows without graph fields are still no turns of anything.
    assert_eq!(g.kind(5), RowKind::Single);
    assert!(g.deps(5).is_empty());
    // a, b and d (no session) are one task; c and e are session s's.
    let tasks = g.tasks(|_| 0.0);
    let calls: Vec<(Option<u32>, u32)> = tasks.iter().map(|t| (t.session, t.calls)).collect();
    assert_eq!(calls, vec![(None, 3), (Some(0), 2)]);
}

#[test]
fn problems_name_the_input_when_there_are_several() {
    let first = r#"{"session_id": "s", "request_id": "a"}
{"session_id": "s", "request_id": "b", "wait_for": ["c"]}
"#;
    let second = r#"{"session_id": "s", "request_id": "c", "wait_for": ["b"]}
{"session_id": "s", "request_id": "a"}
{"session_id": "t", "request_id": "x", "wait_for": ["a"]}
"#;
    let mut b = Builder::new();
    b.file("one.jsonl");
    push_lines(&mut b, first);
    b.file("two.jsonl");
    push_lines(&mut b, second);
    let (_, p) = b.finish();
    let msgs: Vec<String> = p
        .first
        .iter()
        .map(|p| p.clone().into_error().to_string())
        .collect();
    assert_eq!(
        msgs,
        vec![
            "two.jsonl: line 2: field `request_id`: `a` is also the id of one.jsonl: line 1: \
             give each call its own id",
            "two.jsonl: line 3: field `wait_for`: `a` (one.jsonl: line 1) is a call of session \
             \"s\", this row of session \"t\": a call waits only for calls of its own session; \
             give both the same session_id, or remove the id from wait_for",
            "one.jsonl: line 2: fields `wait_for`/`branches`: the calls `b` → `c` → `b` wait \
             for each other (a cycle, one.jsonl: line 2, two.jsonl: line 1): remove one of \
             these edges",
        ]
    );
    // The tool's error is the earliest row's, across the inputs: the
    // cycle on one.jsonl's line 2, not the duplicate on two.jsonl's line 2.
    let e = p.first_error().unwrap().to_string();
    assert!(e.starts_with("one.jsonl: line 2: fields"), "{e}");
    // Without names, lines alone, as before.
    let mut b = Builder::new();
    push_lines(&mut b, first);
    let (_, p) = b.finish();
    assert_eq!(
        p.first_error().unwrap().to_string(),
        "line 2: field `wait_for`: no row has request_id `c`: add the call, or remove the id \
         from wait_for"
    );
}

#[test]
fn the_error_is_the_earliest_line_even_past_the_messages_kept() {
    // Line 1 waits for an unknown id (found at the end); lines 2.. repeat
    // one id (found while reading, so they fill the messages kept first).
    let mut text =
        String::from("{\"session_id\": \"s\", \"request_id\": \"a\", \"wait_for\": [\"nope\"]}\n");
    for _ in 0..(Problems::KEPT + 10) {
        text.push_str("{\"session_id\": \"s\", \"request_id\": \"a\"}\n");
    }
    assert!(
        error(&text).starts_with("line 1: field `wait_for`: no row has request_id `nope`"),
        "{}",
        error(&text)
    );
}
