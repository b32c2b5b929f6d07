//! Real prompts for generated requests: AIBrix's two prompt-collection
//! formats, tokenised once (in parallel, cached per file and tokenizer), and
//! AIBrix's length matcher made seeded and deterministic.
//!
//! Formats (one JSON object per line):
//! - plain: `{"prompt": "...", "completion"?: "..."}`
//! - sessioned: `{"session_id": ..., "prompts": [...], "completions"?: [...]}`
//!   (chosen, as AIBrix does, when the first line has a `session_id`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::hash::{stable_hash, Fnv1a};

use super::rng::Rng;

/// The prompt chosen for one request.
#[derive(Debug, Clone)]
pub struct Picked {
    pub text: String,
    /// Its length in tokens.
    pub prompt_len: u64,
    /// The prompt file's session (sessioned files only).
    pub session_id: Option<String>,
    /// Its index in the collection.
    pub file_session: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    text: usize,
    plen: u64,
    clen: Option<u64>,
}

#[derive(Debug, Clone)]
struct Session {
    id: String,
    turns: Vec<Entry>,
}

/// A prompt collection, tokenised.
#[derive(Debug, Clone)]
pub struct Collection {
    texts: Vec<String>,
    /// Plain: one entry per prompt. Empty for sessioned files.
    plain: Vec<Entry>,
    sessions: Vec<Session>,
}

/// A prompt's text index and its completion's, if any.
type Pair = (usize, Option<usize>);

#[derive(Deserialize)]
struct PlainLine {
    prompt: Option<String>,
    #[serde(default)]
    completion: Option<String>,
}

#[derive(Deserialize)]
struct SessionLine {
    session_id: serde_json::Value,
    #[serde(default)]
    prompts: Vec<String>,
    #[serde(default)]
    completions: Vec<Option<String>>,
}

/// A prompt file as it is read: its texts, and its prompts as indices
/// into them.
#[derive(Default)]
struct Reading {
    texts: Vec<String>,
    // Per prompt: (text index, completion text index).
    plain: Vec<Pair>,
    sessions: Vec<(String, Vec<Pair>)>,
}

impl Reading {
    /// Keeps `t` and returns its index.
    fn push(&mut self, t: String) -> usize {
        self.texts.push(t);
        self.texts.len() - 1
    }

    fn add_plain(&mut self, l: PlainLine) {
        let Some(p) = l.prompt else { return };
        let pi = self.push(p);
        let ci = l.completion.map(|c| self.push(c));
        self.plain.push((pi, ci));
    }

    fn add_session(&mut self, l: SessionLine) {
        if l.prompts.is_empty() {
            return;
        }
        let id = match &l.session_id {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut comps = l.completions.into_iter();
        let turns: Vec<Pair> = l
            .prompts
            .into_iter()
            .map(|p| {
                let c = comps.next().flatten();
                (self.push(p), c.map(|c| self.push(c)))
            })
            .collect();
        // AIBrix merges lines with the same session id.
        match self.sessions.iter_mut().find(|(s, _)| *s == id) {
            Some((_, t)) => t.extend(turns),
            None => self.sessions.push((id, turns)),
        }
    }

    /// The collection, with the token counts `lens` of the texts.
    fn into_collection(self, lens: &[u64]) -> Collection {
        let entry = |(p, c): (usize, Option<usize>)| Entry {
            text: p,
            plen: lens[p],
            clen: c.map(|c| lens[c]),
        };
        Collection {
            plain: self.plain.into_iter().map(entry).collect(),
            sessions: self
                .sessions
                .into_iter()
                .map(|(id, t)| Session {
                    id,
                    turns: t.into_iter().map(entry).collect(),
                })
                .collect(),
            texts: self.texts,
        }
    }
}

impl Collection {
    /// Reads `path` and counts tokens with `tokenizer` (lengths are cached
    /// under `cache_dir`, keyed by the file and the tokenizer).
    pub fn load(
        path: &Path,
        tokenizer: &tokenizers::Tokenizer,
        cache_dir: Option<&Path>,
    ) -> Result<(Collection, bool)> {
        let file = std::fs::File::open(path).map_err(|source| Error::NoInput {
            path: path.to_path_buf(),
            source,
        })?;
        let mut read = Reading::default();
        let mut sessioned = None;
        let bad = |no: usize, e: &dyn std::fmt::Display| {
            Error::Input(format!("{}: line {no}: {e}", path.display()))
        };
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let no = i + 1;
            let line = line.map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => bad(
                    no,
                    &"the line is not UTF-8 (a prompt file is UTF-8 JSON lines; convert it with `iconv -t UTF-8`)",
                ),
                _ => Error::Io(e),
            })?;
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(no, &e))?;
            // The first line decides the file's kind.
            if *sessioned.get_or_insert_with(|| v.get("session_id").is_some()) {
                let l: SessionLine = serde_json::from_value(v).map_err(|e| {
                    bad(
                        no,
                        &format!("{e} (a sessioned prompt file has `session_id` and `prompts`)"),
                    )
                })?;
                read.add_session(l);
            } else {
                let l: PlainLine = serde_json::from_value(v).map_err(|e| {
                    bad(
                        no,
                        &format!(
                            "{e} (a plain prompt file has `prompt` and optionally `completion`)"
                        ),
                    )
                })?;
                read.add_plain(l);
            }
        }
        if read.plain.is_empty() && read.sessions.is_empty() {
            return Err(Error::Input(format!(
                "{}: no prompts (expected lines like {{\"prompt\": \"...\"}})",
                path.display()
            )));
        }
        let (lens, cached) = token_counts(path, &read.texts, tokenizer, cache_dir)?;
        Ok((read.into_collection(&lens), cached))
    }

    pub fn len(&self) -> usize {
        self.plain.len() + self.sessions.iter().map(|s| s.turns.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Token counts of every text, from the cache when the same file (path,
/// size, mtime) was counted with the same tokenizer before.
fn token_counts(
    path: &Path,
    texts: &[String],
    tokenizer: &tokenizers::Tokenizer,
    cache_dir: Option<&Path>,
) -> Result<(Vec<u64>, bool)> {
    let key = cache_key(path, tokenizer);
    let cache_file = cache_dir
        .zip(key)
        .map(|(d, k)| d.join(format!("prompt-lengths-{k:016x}.bin")));
    if let Some(f) = &cache_file {
        if let Ok(bytes) = std::fs::read(f) {
            if bytes.len() == texts.len() * 8 {
                let lens = bytes
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                return Ok((lens, true));
            }
        }
    }
    let lens: Vec<u64> = texts
        .par_iter()
        .map(|t| {
            tokenizer
                .encode(t.as_str(), false)
                .map(|e| e.get_ids().len() as u64)
                .map_err(|e| Error::Input(format!("{}: tokenizing a prompt: {e}", path.display())))
        })
        .collect::<Result<_>>()?;
    if let (Some(f), Some(dir)) = (&cache_file, cache_dir) {
        // A cache that cannot be written only costs time on the next run.
        let bytes: Vec<u8> = lens.iter().flat_map(|l| l.to_le_bytes()).collect();
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, bytes).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok((lens, false))
}

fn cache_key(path: &Path, tokenizer: &tokenizers::Tokenizer) -> Option<u64> {
    let canon = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&canon).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    let mut h = Fnv1a::new(1);
    h.write(canon.to_string_lossy().as_bytes());
    h.write(&meta.len().to_le_bytes());
    h.write(&mtime.as_nanos().to_le_bytes());
    let tok = tokenizer.to_string(false).ok()?;
    h.write(&stable_hash(0, tok.as_bytes()).to_le_bytes());
    Some(h.finish())
}

/// The default cache folder: `$MCTRACE_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/mctrace`, else `~/.cache/mctrace`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("MCTRACE_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("mctrace")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/mctrace")))
}

/// AIBrix's matcher: the tolerance starts at `initial` (0.5, or 0.1 for
/// trace-driven modes) and widens by 0.05 up to 1.0; the first tolerance
/// with candidates picks one uniformly (seeded, with replacement); with none
/// at all, the nearest by (prompt, completion) length.
#[derive(Debug)]
pub struct Matcher {
    coll: Collection,
    /// Plain entries sorted by prompt length (stable: file order in ties).
    by_len: Vec<Entry>,
    /// Sessioned: the sessions with turns left, in file order, and the next
    /// turn of each.
    active: Vec<(usize, usize)>,
    round: u64,
    initial: f64,
    rng: Rng,
    pub within_tolerance: u64,
    pub nearest: u64,
}

impl Matcher {
    pub fn new(coll: Collection, initial: f64, seed: u64) -> Self {
        let mut by_len = coll.plain.clone();
        by_len.sort_by_key(|e| e.plen);
        let active = (0..coll.sessions.len()).map(|i| (i, 0)).collect();
        Matcher {
            coll,
            by_len,
            active,
            round: 0,
            initial,
            rng: Rng::new(seed, 0x70_72_6f_6d_70_74),
            within_tolerance: 0,
            nearest: 0,
        }
    }

    pub fn pick(&mut self, input: u64, output: u64) -> Picked {
        if self.coll.sessions.is_empty() {
            let e = self.pick_plain(input, output);
            Picked {
                text: self.coll.texts[e.text].clone(),
                prompt_len: e.plen,
                session_id: None,
                file_session: None,
            }
        } else {
            self.pick_turn(input, output)
        }
    }

    /// The tolerances tried, as AIBrix's loop does: initial, +0.05, … ≤ 1.
    fn tolerances(&self) -> impl Iterator<Item = f64> {
        let initial = self.initial;
        (0..=20)
            .map(move |k| initial + 0.05 * f64::from(k))
            .take_while(|e| *e <= 1.0 + 1e-9)
    }

    fn range(target: u64, e: f64) -> (u64, u64) {
        if target == 0 {
            return (0, u64::MAX);
        }
        let t = target as f64;
        ((t * (1.0 - e)).max(0.0) as u64, (t * (1.0 + e)) as u64)
    }

    fn pick_plain(&mut self, input: u64, output: u64) -> Entry {
        for e in self.tolerances().collect::<Vec<_>>() {
            let (ilo, ihi) = Self::range(input, e);
            let (olo, ohi) = Self::range(output, e);
            let lo = self.by_len.partition_point(|x| x.plen < ilo);
            let hi = self.by_len.partition_point(|x| x.plen <= ihi);
            let slice = &self.by_len[lo..hi];
            let ok = |x: &Entry| x.clen.is_none_or(|c| c >= olo && c <= ohi);
            let n = slice.iter().filter(|x| ok(x)).count();
            if n > 0 {
                let k = self.rng.below(n as u64) as usize;
                self.within_tolerance += 1;
                if let Some(x) = slice.iter().filter(|x| ok(x)).nth(k) {
                    return *x;
                }
            }
        }
        self.nearest += 1;
        let dist = |x: &Entry| {
            let dp = x.plen as f64 - input as f64;
            let dc = x.clen.map_or(0.0, |c| c as f64 - output as f64);
            dp * dp + dc * dc
        };
        // The first of the nearest in file order, as AIBrix's nsmallest.
        let mut best = self.coll.plain[0];
        for x in &self.coll.plain[1..] {
            if dist(x) < dist(&best) {
                best = *x;
            }
        }
        best
    }

    fn pick_turn(&mut self, input: u64, output: u64) -> Picked {
        if self.active.is_empty() {
            // Every session used: start them over under new ids, so a
            // session id never repeats turns out of order.
            self.round += 1;
            self.active = (0..self.coll.sessions.len()).map(|i| (i, 0)).collect();
        }
        let next = |a: &(usize, usize)| self.coll.sessions[a.0].turns[a.1];
        let mut chosen = None;
        for e in self.tolerances().collect::<Vec<_>>() {
            let (ilo, ihi) = Self::range(input, e);
            let (olo, ohi) = Self::range(output, e);
            let ok = |a: &(usize, usize)| {
                let t = next(a);
                t.plen >= ilo && t.plen <= ihi && t.clen.is_none_or(|c| c >= olo && c <= ohi)
            };
            let n = self.active.iter().filter(|a| ok(a)).count();
            if n > 0 {
                let k = self.rng.below(n as u64) as usize;
                chosen = self
                    .active
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| ok(a))
                    .nth(k)
                    .map(|(i, _)| i);
                break;
            }
        }
        let slot = match chosen {
            Some(i) => {
                self.within_tolerance += 1;
                i
            }
            None => {
                self.nearest += 1;
                let dist = |a: &(usize, usize)| {
                    let t = next(a);
                    let dp = t.plen as f64 - input as f64;
                    let dc = t.clen.map_or(0.0, |c| c as f64 - output as f64);
                    dp * dp + dc * dc
                };
                let mut best = 0;
                for i in 1..self.active.len() {
                    if dist(&self.active[i]) < dist(&self.active[best]) {
                        best = i;
                    }
                }
                best
            }
        };
        self.take(slot)
    }

    /// Uses the next turn of the active session in `slot`.
    fn take(&mut self, slot: usize) -> Picked {
        let (s, t) = self.active[slot];
        let session = &self.coll.sessions[s];
        let turn = session.turns[t];
        if t + 1 < session.turns.len() {
            self.active[slot].1 += 1;
        } else {
            self.active.remove(slot);
        }
        let id = if self.round == 0 {
            session.id.clone()
        } else {
            format!("{}-r{}", session.id, self.round)
        };
        Picked {
            text: self.coll.texts[turn.text].clone(),
            prompt_len: turn.plen,
            session_id: Some(id),
            file_session: Some(s),
        }
    }

    /// For a later turn of a generated conversation: the next turn of the
    /// prompt-file session its first turn came from, so the conversation's
    /// text stays one conversation; a new match when that session has no
    /// turns left (or the file is plain).
    pub fn pick_next(&mut self, file_session: Option<usize>, input: u64, output: u64) -> Picked {
        let slot = file_session.and_then(|s| self.active.iter().position(|a| a.0 == s));
        match slot {
            Some(slot) => {
                self.within_tolerance += 1;
                self.take(slot)
            }
            None => self.pick(input, output),
        }
    }

    /// True for a sessioned prompt file.
    pub fn is_sessioned(&self) -> bool {
        !self.coll.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lens: &[(u64, Option<u64>)]) -> Collection {
        Collection {
            texts: (0..lens.len()).map(|i| format!("p{i}")).collect(),
            plain: lens
                .iter()
                .enumerate()
                .map(|(i, &(plen, clen))| Entry {
                    text: i,
                    plen,
                    clen,
                })
                .collect(),
            sessions: vec![],
        }
    }

    #[test]
    fn picks_within_the_first_tolerance_that_has_candidates() {
        // Target 100: 0.5 → [50, 150] holds p1 (120) only.
        let mut m = Matcher::new(plain(&[(10, None), (120, None), (400, None)]), 0.5, 0);
        for _ in 0..20 {
            assert_eq!(m.pick(100, 0).text, "p1");
        }
        // Target 20 at 0.1: [18, 22] is empty; widening reaches 10 at 0.5.
        let mut m = Matcher::new(plain(&[(10, None), (120, None)]), 0.1, 0);
        assert_eq!(m.pick(20, 0).text, "p0");
    }

    #[test]
    fn falls_back_to_the_nearest() {
        // Target 1: even at tolerance 1.0 the range is [0, 2]; 10 is nearest.
        let mut m = Matcher::new(plain(&[(5000, Some(5)), (10, Some(5))]), 0.5, 0);
        let p = m.pick(1, 0);
        assert_eq!(p.text, "p1");
        assert_eq!(m.nearest, 1);
    }
}
