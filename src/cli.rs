//! What every tool shares on the command line: parsing (with
//! `--completions` and `--man`), usage errors, and turning a result into an
//! exit code. The record loop and the input/output options are in `filter`.

use std::io::Write;

use crate::error::{Error, ExitCode, Result};

/// The end of every `main`: prints `TOOL: error` and maps it to an exit code;
/// a closed stdout is a quiet success.
pub fn exit(tool: &str, result: Result<()>) -> std::process::ExitCode {
    std::process::ExitCode::from(exit_code(tool, result) as u8)
}

fn exit_code(tool: &str, result: Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::Success,
        Err(e) if e.is_broken_pipe() => ExitCode::Success,
        Err(e) => {
            // `{:#}`: the whole cause chain ("cannot list models …: io:
            // Connection refused"), as ripgrep prints it; one write, and a
            // stderr that cannot take it does not change the exit code.
            crate::say::line(&format!("{tool}: {e:#}"));
            e.exit_code()
        }
    }
}

// Options every tool has: it writes its own shell completions and
// man page, so they always match its options. (A plain comment: a doc
// comment here would become every tool's `about` when the options are added.)
#[derive(Debug, Clone, clap::Args)]
struct DocArgs {
    /// Print the completion script for SHELL and exit.
    #[arg(long, value_enum, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,

    /// Print the man page (roff) and exit.
    #[arg(long)]
    man: bool,
}

/// Parses a tool's arguments (exiting on `--help`, `--version` and usage
/// errors, as clap does). `--completions SHELL` and `--man` are added to
/// every tool here: they print and exit 0.
pub fn parse_args<A: clap::Parser>(tool: &'static str) -> A {
    use clap::{Args as _, FromArgMatches as _};
    let cmd = one_input_rule(A::command().name(tool).bin_name(tool));
    let matches = DocArgs::augment_args(cmd.clone()).get_matches();
    let doc = DocArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if doc.completions.is_some() || doc.man {
        let mut out = Vec::new();
        let written = match doc.completions {
            Some(shell) => {
                clap_complete::generate(shell, &mut cmd.clone(), tool, &mut out);
                Ok(())
            }
            None => clap_mangen::Man::new(cmd).render(&mut out),
        };
        let result = written
            .and_then(|()| std::io::stdout().lock().write_all(&out))
            .map_err(Error::Io);
        std::process::exit(exit_code(tool, result) as i32);
    }
    A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The input options' plain FILE argument (`filter::IoArgs`): in a tool
/// that reads one input, FILE and `--input` together are a usage error; in
/// one with a list of inputs of its own (mc-import's FILE...), FILE is
/// the first of them and is left out of `--help`, which shows the list.
fn one_input_rule(mut cmd: clap::Command) -> clap::Command {
    let modes: Vec<String> = cmd
        .get_subcommands()
        .map(|m| m.get_name().to_string())
        .collect();
    for mode in modes {
        cmd = cmd.mut_subcommand(mode, one_input_rule);
    }
    let has = |id: &str| cmd.get_arguments().any(|a| a.get_id() == id);
    if !(has("file") && has("input")) {
        return cmd;
    }
    let other_positional = cmd.get_positionals().any(|a| a.get_id() != "file");
    if other_positional {
        cmd.mut_arg("file", |a| a.hide(true))
    } else {
        cmd.mut_arg("file", |a| a.conflicts_with("input"))
    }
}
