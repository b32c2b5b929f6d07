//! `mc-gen prompts`: a synthetic prompt collection in AIBrix's formats, for
//! users without one: groups of prompts sharing a prefix (as AIBrix's
//! synthetic prefix-sharing dataset) and, with --turns > 1, multi-turn
//! sessions (as its multi-turn dataset). Lengths are in words, drawn from a
//! fixed vocabulary, so no tokenizer is needed.

use super::dist::LengthDist;
use super::rng::Rng;
use super::Common;
use crate::error::{Error, Result};
use crate::jsonl::Output;

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen prompts --prefix-groups 8 --per-group 50 --turns uniform:2:5 > sessions.jsonl"
)]
pub struct PromptsArgs {
    /// Number of shared prefixes.
    #[arg(long, default_value_t = 4, value_name = "G")]
    pub prefix_groups: u64,

    /// Prompts (or sessions, with --turns > 1) per prefix group.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub per_group: u64,

    /// Words of each shared prefix.
    #[arg(long, default_value = "200", value_name = "DIST")]
    pub prefix_words: LengthDist,

    /// Words after the prefix (each prompt's own text).
    #[arg(long, default_value = "lognormal:300:0.6", value_name = "DIST")]
    pub suffix_words: LengthDist,

    /// Turns per session; 1 writes a plain collection.
    #[arg(long, default_value = "1", value_name = "DIST")]
    pub turns: LengthDist,
}

const VOCAB: [&str; 32] = [
    "system", "model", "cache", "token", "request", "server", "latency", "batch", "prefix",
    "answer", "question", "context", "memory", "kernel", "queue", "stream", "engine", "trace",
    "window", "block", "session", "prompt", "output", "input", "rate", "load", "tool", "plan",
    "agent", "result", "value", "data",
];

fn words(rng: &mut Rng, n: u64, out: &mut String) {
    for _ in 0..n {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(VOCAB[rng.below(VOCAB.len() as u64) as usize]);
    }
}

pub fn run(tool: &str, common: &Common, a: &PromptsArgs) -> Result<()> {
    if common.prompt_file.is_some() {
        return Err(Error::Usage(
            "`prompts` writes a prompt file; it takes no --prompt-file".into(),
        ));
    }
    use crate::limits::{MAX_GEN_ROWS, MAX_ROW_TOKENS};
    if a.prefix_groups
        .checked_mul(a.per_group)
        .is_none_or(|n| n > MAX_GEN_ROWS)
    {
        return Err(Error::Usage(format!(
            "--prefix-groups {} × --per-group {} is above the limit of {MAX_GEN_ROWS} lines",
            a.prefix_groups, a.per_group
        )));
    }
    let mut rng = Rng::new(common.seed, 40);
    let mut out = Output::open(common.output.as_deref(), common.line_buffered)?;
    let (mut n, mut n_lines) = (0u64, 0u64);
    for g in 0..a.prefix_groups {
        let mut prefix = format!("[group {g}]");
        let pw = a.prefix_words.sample(&mut rng, 0);
        words(&mut rng, pw, &mut prefix);
        for k in 0..a.per_group {
            let turns = a.turns.sample(&mut rng, 1);
            let mut prompts = Vec::new();
            let mut line_words = pw;
            for t in 0..turns {
                // Only a session's first turn carries the shared prefix; later
                // turns are the user's new text.
                let mut p = if t == 0 {
                    prefix.clone()
                } else {
                    String::new()
                };
                let sw = a.suffix_words.sample(&mut rng, 1);
                line_words = line_words.saturating_add(sw);
                if line_words > MAX_ROW_TOKENS {
                    return Err(Error::Usage(format!(
                        "line {}: a session of {} turns grows past {MAX_ROW_TOKENS} words, the \
                         limit of one row; lower --turns, --prefix-words or --suffix-words",
                        n_lines + 1,
                        turns
                    )));
                }
                words(&mut rng, sw, &mut p);
                prompts.push(p);
            }
            let line = if a.turns == LengthDist::Const(1) {
                serde_json::json!({ "prompt": prompts[0] })
            } else {
                serde_json::json!({ "session_id": format!("g{g}-s{k}"), "prompts": prompts })
            };
            let buf = out.buffer();
            let _ = serde_json::to_writer(&mut *buf, &line);
            buf.push(b'\n');
            out.end_line()?;
            n += turns;
            n_lines += 1;
        }
    }
    out.flush()?;
    eprintln!(
        "{tool}: {n} prompts in {} lines",
        a.prefix_groups * a.per_group
    );
    Ok(())
}
