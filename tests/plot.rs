//! mc-plot: the figure of a trace, run as a user would.

use crate::util::{assert_success, run_ok, tool};

const TRACE: &str = r#"{"timestamp": 0, "session_id": "a", "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 500, "session_id": "b", "input_length": 512, "output_length": 20, "hash_ids": [1]}
{"session_id": "a", "delay": 1500, "input_length": 1536, "output_length": 30, "hash_ids": [1, 2, 3]}
"#;

const TITLES: [&str; 7] = [
    "Requests per second",
    "Tokens per second",
    "Mean tokens per request",
    "Prefix-cache hit rate (causal model)",
    "Input length histogram",
    "Output length histogram",
    "Sessions (first 2 of 2; later turns at delay after the previous arrival)",
];

#[test]
fn draws_one_svg_with_each_panel_once() {
    let svg = run_ok(
        "mc-plot",
        &["--window-ms", "1000", "--block-size", "512"],
        TRACE,
    );
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    for t in TITLES {
        assert_eq!(svg.matches(&format!(">\n{t}\n</text>")).count(), 1, "{t}");
    }
    // No external reference: the file opens from disk as it is.
    assert!(!svg.contains("http://www.w3.org/1999/xlink\" href=\"http"));
}

#[test]
fn bad_input_and_bad_options_exit_with_their_codes() {
    tool("mc-plot")
        .write_stdin("{\"timestamp\": \"x\"}\n")
        .assert()
        .code(65)
        .stderr(predicates::str::contains("line 1"));
    tool("mc-plot")
        .args(["--window-ms", "0"])
        .write_stdin(TRACE)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--window-ms"));
    tool("mc-plot").write_stdin("").assert().code(65);
}

/// `mc-gen --plot` draws exactly the figure mc-plot draws of the rows it
/// wrote (same defaults), and refuses a format mc-plot cannot read.
#[test]
fn mc_gen_plot_is_mc_plots_figure_of_the_generated_rows() {
    let dir = tempfile::tempdir().unwrap();
    let gen_svg = dir.path().join("gen.svg");
    let plot_svg = dir.path().join("plot.svg");
    let out = crate::util::tool("mc-gen")
        .args(["sessions", "--sessions", "5", "--plot"])
        .arg(&gen_svg)
        .output()
        .unwrap();
    assert_success(&out);
    let plotted = crate::util::tool("mc-plot")
        .arg("--svg")
        .arg(&plot_svg)
        .write_stdin(out.stdout)
        .output()
        .unwrap();
    assert!(plotted.status.success());
    let (a, b) = (
        std::fs::read_to_string(&gen_svg).unwrap(),
        std::fs::read_to_string(&plot_svg).unwrap(),
    );
    assert!(a.starts_with("<svg"), "{}", &a[..a.len().min(80)]);
    assert_eq!(a, b);
    crate::util::tool("mc-gen")
        .args([
            "constant",
            "--qps",
            "1",
            "--duration-ms",
            "1000",
            "--format",
            "aibrix",
            "--plot",
        ])
        .arg(dir.path().join("x.svg"))
        .assert()
        .code(2);
}

/// Rows of 16-token blocks: the only power of two all three allow is 16.
const TRACE16: &str = r#"{"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 20, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 20, "input_length": 48, "output_length": 1, "hash_ids": [1, 2, 3]}
"#;

/// `--block-size auto` (the default) detects the size as every tool does
/// and names it; a size most rows contradict is bad data (exit 65)
/// naming the rows' size.
#[test]
fn block_size_is_detected_and_a_contradicting_one_refused() {
    let auto = crate::util::run_ok_both("mc-plot", &["--window-ms", "10"], TRACE16);
    assert!(
        auto.1
            .contains("mc-plot: block size 16 (detected from the first 3 rows with hash_ids)"),
        "{}",
        auto.1
    );
    let given = run_ok(
        "mc-plot",
        &["--window-ms", "10", "--block-size", "16"],
        TRACE16,
    );
    assert_eq!(auto.0, given);
    tool("mc-plot")
        .args(["--block-size", "512"])
        .write_stdin(TRACE16)
        .assert()
        .code(65)
        .stderr(predicates::str::contains(
            "--block-size 512: 3 of 3 rows with hash_ids do not fit it (the rows say 16",
        ));
    // Rows that decide no size (one block each: any size from 40 up) are
    // an error under auto, naming the fix; a size given by hand is used.
    let one_block = "{\"input_length\": 40, \"hash_ids\": [1]}\n";
    tool("mc-plot")
        .write_stdin(one_block)
        .assert()
        .code(65)
        .stderr(predicates::str::contains("pass --block-size B"));
    run_ok("mc-plot", &["--block-size", "64"], one_block);
}

/// Axis numbers as a person writes them: the 20,000-token rows' axis
/// says `20k`, never `20000.0`.
#[test]
fn axes_write_numbers_as_people_do() {
    let rows: String = (0..4)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 64}}\n",
                i * 1500,
                10000 + i * 10000
            )
        })
        .collect();
    let svg = run_ok("mc-plot", &["--window-ms", "1000", "--bins", "4"], &rows);
    assert!(
        svg.contains(">20k<") || svg.contains(">\n20k\n<"),
        "no 20k label"
    );
    assert!(
        !svg.contains("20000.0") && !svg.contains("\n20000\n"),
        "a raw number"
    );
}
