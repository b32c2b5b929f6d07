//! mc-import --from otel: OTLP/JSON exports of OpenTelemetry GenAI spans
//! (semantic conventions v1.37.0) into agent graphs. The documents are
//! built here by hand from the OTLP/JSON encoding (camelCase fields, ids as
//! hex strings, times and intValue as decimal strings), and every expected
//! row is worked out by hand in the comments.

use serde_json::{json, Value};

use crate::util::{run, run_code, run_ok_both, temp_files};

/// 2025-11-27T08:00:00Z in ns: the spans' times are this plus ms offsets.
const EPOCH_NS: u64 = 1_764_230_400_000_000_000;

const T1: &str = "0af7651916cd43dd8448eb211c80319c";
const T2: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// One span as OTLP/JSON writes it, named `name`: `op` is `gen_ai.operation.name`,
/// `tokens` the LLM call's usage (as intValue strings), times in ms after
/// [`EPOCH_NS`].
fn span(
    trace: &str,
    id: &str,
    parent: &str,
    (name, op): (&str, &str),
    (start_ms, end_ms): (u64, u64),
    tokens: Option<(u64, u64)>,
    extra: &[(&str, &str)],
) -> Value {
    let mut attributes =
        vec![json!({"key": "gen_ai.operation.name", "value": {"stringValue": op}})];
    if let Some((input, output)) = tokens {
        attributes.push(json!({"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}}));
        attributes.push(
            json!({"key": "gen_ai.usage.input_tokens", "value": {"intValue": input.to_string()}}),
        );
        attributes.push(
            json!({"key": "gen_ai.usage.output_tokens", "value": {"intValue": output.to_string()}}),
        );
    }
    for (k, v) in extra {
        attributes.push(json!({"key": k, "value": {"stringValue": v}}));
    }
    json!({
        "traceId": trace,
        "spanId": id,
        "parentSpanId": parent,
        "name": name,
        // SPAN_KIND_CLIENT for calls, SPAN_KIND_INTERNAL otherwise.
        "kind": if tokens.is_some() { 3 } else { 1 },
        "startTimeUnixNano": (EPOCH_NS + start_ms * 1_000_000).to_string(),
        "endTimeUnixNano": (EPOCH_NS + end_ms * 1_000_000).to_string(),
        "attributes": attributes,
        "status": {}
    })
}

/// An `ExportTraceServiceRequest` holding `spans`.
fn document(spans: Vec<Value>) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent-app"}}]},
        "scopeSpans": [{
            "scope": {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.1b0"},
            "spans": spans
        }]
    }]})
}

fn chat(trace: &str, id: &str, parent: &str, at: (u64, u64), tokens: (u64, u64)) -> Value {
    span(
        trace,
        id,
        parent,
        ("chat gpt-4o", "chat"),
        at,
        Some(tokens),
        &[],
    )
}

fn agent(
    trace: &str,
    id: &str,
    parent: &str,
    name: &str,
    at: (u64, u64),
    extra: &[(&str, &str)],
) -> Value {
    let mut attrs = vec![("gen_ai.agent.name", name)];
    attrs.extend_from_slice(extra);
    span(
        trace,
        id,
        parent,
        (&format!("invoke_agent {name}"), "invoke_agent"),
        at,
        None,
        &attrs,
    )
}

fn tool(trace: &str, id: &str, parent: &str, name: &str, at: (u64, u64)) -> Value {
    span(
        trace,
        id,
        parent,
        (&format!("execute_tool {name}"), "execute_tool"),
        at,
        None,
        &[("gen_ai.tool.name", name)],
    )
}

/// Trace 1 (no conversation id: its session is the trace): agent `a1`
/// makes call c01 (0..1000 ms), then two parallel calls c02 (1200..2000)
/// and c03 (1250..2500), runs the tool `get_weather` (2600..2900), then the
/// joining call c04 (3000..4000).
fn trace1() -> Vec<Value> {
    let a = "00000000000000a1";
    vec![
        agent(T1, a, "", "planner", (0, 4100), &[]),
        chat(T1, "0000000000000c01", a, (0, 1000), (100, 20)),
        chat(T1, "0000000000000c02", a, (1200, 2000), (150, 30)),
        chat(T1, "0000000000000c03", a, (1250, 2500), (160, 40)),
        tool(T1, "00000000000000f1", a, "get_weather", (2600, 2900)),
        chat(T1, "0000000000000c04", a, (3000, 4000), (300, 50)),
    ]
}

/// Trace 2 (conversation `conv-42`): agent `a2` makes call d01
/// (10000..10500), then starts two sub-agents side by side: `researcher`
/// (a3: call e01 10700..11500, tool `search` 11500..12000, call e02
/// 12100..12900) and `writer` (a4: call e03 10800..11900); then the
/// joining call d02 (13200..14000).
fn trace2() -> Vec<Value> {
    let (a2, a3, a4) = ("00000000000000a2", "00000000000000a3", "00000000000000a4");
    let conv = [("gen_ai.conversation.id", "conv-42")];
    vec![
        agent(T2, a2, "", "orchestrator", (10000, 14100), &conv),
        chat(T2, "0000000000000d01", a2, (10000, 10500), (200, 10)),
        agent(T2, a3, a2, "researcher", (10600, 13000), &[]),
        chat(T2, "0000000000000e01", a3, (10700, 11500), (50, 20)),
        tool(T2, "00000000000000f2", a3, "search", (11500, 12000)),
        chat(T2, "0000000000000e02", a3, (12100, 12900), (120, 30)),
        agent(T2, a4, a2, "writer", (10650, 12000), &[]),
        chat(T2, "0000000000000e03", a4, (10800, 11900), (60, 40)),
        span(
            T2,
            "0000000000000d02",
            a2,
            ("chat gpt-4o", "chat"),
            (13200, 14000),
            Some((400, 60)),
            &conv,
        ),
    ]
}

/// The rows worked out by hand.
///
/// Trace 1, agent a1's timeline: c02 and c03 started after c01 ended and
/// overlap, so both wait for c01 (its `branches`, released 200 and 250 ms
/// after its end). c04 started at 3000 after all three ended; c01 ended
/// before c02 started, so only c02 and c03 are direct (`wait_for`). Its
/// gap, 3000 - 2500 = 500 ms, holds the tool's 300 ms: `tool_wait_ms`
/// 300, `delay` 200.
///
/// Trace 2, agent a2's timeline: d01, the sub-agents a3 (hull 10600..13000)
/// and a4 (10650..12000), d02. Both sub-agents started after d01 ended and
/// overlap: branches of d01, opened into their first calls e01 (200 ms
/// after d01's end) and e03 (300 ms), which start fresh contexts. Inside
/// a3, e02 waits for e01: 12100 - 11500 = 600 ms, 500 of them the
/// `search` tool. d02 waits for both sub-agents, i.e. their last calls
/// e03 (ended 11900) and e02 (ended 12900): 13200 - 12900 = 300 ms.
/// Session 2 starts 10000 ms after session 1's first call.
const EXPECTED: &str = concat!(
    r#"{"timestamp": 0, "session_id": "0af7651916cd43dd8448eb211c80319c", "input_length": 100, "output_length": 20, "request_id": "0000000000000c01", "branches": ["0000000000000c02", "0000000000000c03"]}"#,
    "\n",
    r#"{"session_id": "0af7651916cd43dd8448eb211c80319c", "delay": 200, "input_length": 150, "output_length": 30, "request_id": "0000000000000c02"}"#,
    "\n",
    r#"{"session_id": "0af7651916cd43dd8448eb211c80319c", "delay": 250, "input_length": 160, "output_length": 40, "request_id": "0000000000000c03"}"#,
    "\n",
    r#"{"session_id": "0af7651916cd43dd8448eb211c80319c", "delay": 200, "input_length": 300, "output_length": 50, "request_id": "0000000000000c04", "wait_for": ["0000000000000c02", "0000000000000c03"], "tool_wait_ms": 300}"#,
    "\n",
    r#"{"timestamp": 10000, "session_id": "conv-42", "input_length": 200, "output_length": 10, "request_id": "0000000000000d01", "branches": ["0000000000000e01", "0000000000000e03"]}"#,
    "\n",
    r#"{"session_id": "conv-42", "delay": 200, "input_length": 50, "output_length": 20, "request_id": "0000000000000e01", "prefix_reset": true}"#,
    "\n",
    r#"{"session_id": "conv-42", "delay": 300, "input_length": 60, "output_length": 40, "request_id": "0000000000000e03", "prefix_reset": true}"#,
    "\n",
    r#"{"session_id": "conv-42", "delay": 100, "input_length": 120, "output_length": 30, "request_id": "0000000000000e02", "wait_for": ["0000000000000e01"], "tool_wait_ms": 500}"#,
    "\n",
    r#"{"session_id": "conv-42", "delay": 300, "input_length": 400, "output_length": 60, "request_id": "0000000000000d02", "wait_for": ["0000000000000e03", "0000000000000e02"]}"#,
    "\n",
);

/// Both traces in one pretty-printed document.
fn one_document() -> String {
    let mut spans = trace1();
    spans.extend(trace2());
    serde_json::to_string_pretty(&document(spans)).unwrap()
}

#[test]
fn a_hand_built_export_becomes_the_graph_worked_out_by_hand() {
    let (out, err) = run_ok_both("mc-import", &["--from", "otel"], &one_document());
    assert_eq!(out, EXPECTED);
    assert!(err.contains("otel: 9 rows in, 9 rows out"), "{err}");
    assert!(
        err.contains(
            "GenAI semantic conventions v1.37.0; 2 traces in 2 sessions; 4 agent spans, 2 tool spans"
        ),
        "{err}"
    );
    assert!(err.contains("no hash_ids"), "{err}");
    // --from auto finds it.
    let (auto, err) = run_ok_both("mc-import", &[] as &[&str], &one_document());
    assert_eq!(auto, EXPECTED);
    assert!(err.contains("reading otel"), "{err}");
}

#[test]
fn json_lines_with_a_trace_split_over_documents_give_the_same_rows() {
    // The Collector's file exporter: one document a line, a trace's spans
    // in several batches, children before their parents.
    let mut t2 = trace2();
    let late = t2.split_off(5);
    let mut first = late;
    first.reverse();
    let lines = [
        document(first).to_string(),
        document(trace1()).to_string(),
        document(t2).to_string(),
    ]
    .join("\n");
    let (out, _) = run_ok_both("mc-import", &["--from", "otel"], &(lines.clone() + "\n"));
    assert_eq!(out, EXPECTED);
    // The same export over two files.
    let mut parts = lines.splitn(2, '\n');
    let (a, b) = (parts.next().unwrap(), parts.next().unwrap());
    let (_dir, files) = temp_files(&[("a.jsonl", a), ("b.jsonl", b)]);
    let r = run(
        "mc-import",
        &[
            "--from",
            "otel",
            files[0].to_str().unwrap(),
            files[1].to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, EXPECTED);
}

#[test]
fn mc_analyze_reports_the_parallelism() {
    let (out, _) = run_ok_both("mc-import", &["--from", "otel"], &one_document());
    let (report, _) = run_ok_both("mc-analyze", &[] as &[&str], &out);
    let section = report
        .split("Agent graphs")
        .nth(1)
        .unwrap_or_else(|| panic!("no Agent graphs section:\n{report}"));
    let value = |name: &str| -> String {
        let line = section
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` in:\n{section}"));
        line.split_whitespace().last().unwrap().to_string()
    };
    assert_eq!(value("graph rows"), "9");
    assert_eq!(value("tasks (graph sessions)"), "2");
    // c01 and d01 each start two calls.
    assert_eq!(value("max fan-out"), "2");
    assert_eq!(value("peak parallelism"), "2");
    assert_eq!(value("prefix resets"), "2");
    // 300 + 500 ms of tools, 200+250+200 + 200+300+100+300 = 1550 ms of the rest.
    assert_eq!(value("tool wait (ms)"), "800.00");
    assert_eq!(value("think time (ms)"), "1,550.00");
}

#[test]
fn the_traces_of_one_conversation_are_one_session() {
    // Two turns of conversation `c`, each its own trace: the second
    // trace's call waits for the first's (a plain chain, 5000 ms apart).
    let conv = [("gen_ai.conversation.id", "c")];
    let spans = vec![
        span(
            T1,
            "0000000000000001",
            "",
            ("chat m", "chat"),
            (0, 1000),
            Some((10, 5)),
            &conv,
        ),
        span(
            T2,
            "0000000000000002",
            "",
            ("chat m", "chat"),
            (6000, 7000),
            Some((30, 5)),
            &conv,
        ),
    ];
    let (out, _) = run_ok_both(
        "mc-import",
        &["--from", "otel"],
        &document(spans).to_string(),
    );
    assert_eq!(
        out,
        "{\"timestamp\": 0, \"session_id\": \"c\", \"input_length\": 10, \"output_length\": 5, \"request_id\": \"0000000000000001\"}\n\
         {\"session_id\": \"c\", \"delay\": 5000, \"input_length\": 30, \"output_length\": 5, \"request_id\": \"0000000000000002\", \"wait_for\": [\"0000000000000001\"]}\n"
    );
}

#[test]
fn synth_hash_ids_gives_fresh_ids() {
    let (out, _) = run_ok_both(
        "mc-import",
        &["--from", "otel", "--synth-hash-ids", "--block-size", "64"],
        &document(trace1()).to_string(),
    );
    // 100, 150, 160, 300 tokens at 64 a block: 2, 3, 3, 5 fresh ids.
    let ids: Vec<Vec<u64>> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            serde_json::from_value(v["hash_ids"].clone()).unwrap()
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            vec![0, 1],
            vec![2, 3, 4],
            vec![5, 6, 7],
            vec![8, 9, 10, 11, 12]
        ]
    );
}

#[test]
fn bad_spans_name_the_line_the_span_and_the_field() {
    // A call without output tokens, on the second line of JSON lines.
    let mut no_usage = chat(T2, "00000000000000b1", "", (0, 10), (5, 5));
    no_usage["attributes"]
        .as_array_mut()
        .unwrap()
        .retain(|a| a["key"] != "gen_ai.usage.output_tokens");
    let input = format!(
        "{}\n{}\n",
        document(trace1()),
        document(vec![no_usage.clone()])
    );
    let err = run_code("mc-import", &["--from", "otel"], &input, 65);
    assert!(
        err.contains(
            "line 2: span `00000000000000b1` (`chat gpt-4o`) of trace `4bf92f3577b34da6a3ce929d0e0e4736`: \
             field `gen_ai.usage.output_tokens`: missing: an LLM call (`chat`) needs its token counts"
        ),
        "{err}"
    );
    // --on-error skip leaves the call out and says so.
    let r = run(
        "mc-import",
        &["--from", "otel", "--on-error", "skip"],
        &input,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 4);
    assert!(
        r.stderr.contains("skipped 1 bad line (line 2)"),
        "{}",
        r.stderr
    );

    // In a pretty-printed document the line is the span's own: its
    // spanId's line, not an earlier mention as another span's parent.
    let mut spans = vec![chat(
        T1,
        "00000000000000b2",
        "00000000000000b1",
        (20, 30),
        (1, 1),
    )];
    spans.push(no_usage);
    let pretty = serde_json::to_string_pretty(&document(spans)).unwrap();
    let line = pretty
        .lines()
        .position(|l| l.contains("\"spanId\": \"00000000000000b1\""))
        .unwrap()
        + 1;
    let err = run_code("mc-import", &["--from", "otel"], &pretty, 65);
    assert!(
        err.contains(&format!("line {line}: span `00000000000000b1`")),
        "{err}"
    );

    // Tokens not a whole number; a span ending before it starts.
    let mut bad = chat(T1, "00000000000000b3", "", (0, 10), (5, 5));
    bad["attributes"][2]["value"] = json!({"intValue": "5.5"});
    let err = run_code(
        "mc-import",
        &["--from", "otel"],
        &document(vec![bad]).to_string(),
        65,
    );
    assert!(
        err.contains("field `gen_ai.usage.input_tokens`: expected an intValue (a whole number of tokens), found \"5.5\""),
        "{err}"
    );
    let backwards = chat(T1, "00000000000000b4", "", (10, 5), (5, 5));
    let err = run_code(
        "mc-import",
        &["--from", "otel"],
        &document(vec![backwards]).to_string(),
        65,
    );
    assert!(
        err.contains("span `00000000000000b4` (`chat gpt-4o`) of trace `0af7651916cd43dd8448eb211c80319c`: field `endTimeUnixNano`"),
        "{err}"
    );
}

#[test]
fn bad_documents_name_the_line_and_the_fix() {
    // Not an export at all: serde's words with the line and column.
    let err = run_code(
        "mc-import",
        &["--from", "otel"],
        "{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": 5}]}]}\n",
        65,
    );
    assert!(err.contains("line 1: column"), "{err}");
    // A span exported twice.
    let input = format!("{}\n{}\n", document(trace1()), document(trace1()));
    let err = run_code("mc-import", &["--from", "otel"], &input, 65);
    assert!(
        err.contains("line 2: span `00000000000000a1` (`invoke_agent planner`) of trace `0af7651916cd43dd8448eb211c80319c` is also at line 1: each span once"),
        "{err}"
    );
    // Parents in a circle.
    let spans = vec![
        chat(T1, "0000000000000001", "0000000000000002", (0, 1), (1, 1)),
        chat(T1, "0000000000000002", "0000000000000001", (0, 1), (1, 1)),
    ];
    let err = run_code(
        "mc-import",
        &["--from", "otel"],
        &document(spans).to_string(),
        65,
    );
    assert!(
        err.contains("the spans `0000000000000001` → `0000000000000002` are each other's parents"),
        "{err}"
    );
}

#[test]
fn the_release_rule_gives_back_the_recorded_starts() {
    // Each call taking its recorded time, the core graph's release rule
    // must start every call when the spans say it started.
    let (out, _) = run_ok_both("mc-import", &["--from", "otel"], &one_document());
    let g = mctrace::graph::Graphs::from_lines(&out).unwrap();
    // Rows in output order: c01..c04, d01, e01, e03, e02, d02.
    let took = [
        1000.0, 800.0, 1250.0, 1000.0, 500.0, 800.0, 1100.0, 800.0, 800.0,
    ];
    let starts: Vec<f64> = g.schedule(|r| took[r]).iter().map(|t| t.0).collect();
    assert_eq!(
        starts,
        [0.0, 1200.0, 1250.0, 3000.0, 10000.0, 10700.0, 10800.0, 12100.0, 13200.0]
    );
}
