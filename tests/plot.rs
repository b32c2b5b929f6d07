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
