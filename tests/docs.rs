//! Every tool writes its own completions and man page.

use crate::util::tool;

const TOOLS: [&str; 13] = [
    "mc-fit",
    "mc-import",
    "mc-merge",
    "mc-scale",
    "mc-roots",
    "mc-cap",
    "mc-analyze",
    "nat2mc",
    "mc-replay",
    "mc-mock",
    "mc-gen",
    "mc-plot",
    "mc-report",
];

#[test]
fn completions_and_man_pages() {
    for name in TOOLS {
        let out = tool(name).args(["--completions", "bash"]).output().unwrap();
        assert!(out.status.success(), "{name}");
        let bash = String::from_utf8(out.stdout).unwrap();
        // The script completes this binary, and knows its long options.
        assert!(
            bash.contains(&format!("complete -F _{}", name.replace('-', "__"))),
            "{name}: {bash}"
        );
        assert!(bash.contains("--help"), "{name}");
        let out = tool(name).args(["--completions", "zsh"]).output().unwrap();
        assert!(String::from_utf8(out.stdout)
            .unwrap()
            .starts_with(&format!("#compdef {name}")));
        let out = tool(name).arg("--man").output().unwrap();
        assert!(out.status.success(), "{name}");
        let man = String::from_utf8(out.stdout).unwrap();
        assert!(
            man.starts_with(".ie"),
            "{name}: {}",
            &man[..man.len().min(200)]
        );
        assert!(man.contains(&format!(".TH {name}")), "{name}");
        // Both options are listed in --help, so users can find them.
        let help = String::from_utf8(tool(name).arg("--help").output().unwrap().stdout).unwrap();
        assert!(
            help.contains("--completions") && help.contains("--man"),
            "{name}"
        );
        // --version names the tool, not the package.
        let version = tool(name).arg("--version").output().unwrap();
        assert!(version.status.success(), "{name}");
        assert_eq!(
            String::from_utf8(version.stdout).unwrap(),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    // The replay-specific options reach the man page.
    let man = tool("mc-replay").arg("--man").output().unwrap().stdout;
    assert!(String::from_utf8(man).unwrap().contains("drain\\-timeout"));
}
