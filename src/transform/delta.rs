//! `mc-scale --to-delta` / `--from-delta`: Dynamo's `mooncake-delta` rows
//! (docs/format.md, "The delta form"; the reader it follows and why the
//! rules are these: docs/decisions/0032-delta-sessions-and-samples.md).
//!
//! In the delta form a later turn of a session carries only its new input:
//! `input_length` is the new tokens, `hash_ids` exactly `ceil(new / B)` ids
//! naming them. The prompt it stands for is the previous prompt, the
//! previous answer (`output_length`) and the new tokens. The full form's
//! ids between the previous prompt's full blocks and the new tokens' ids
//! (the blocks holding the previous partial block and answer) have no
//! place in Dynamo's row: they go in `context_ids`, a field Dynamo ignores,
//! so full -> delta -> full gives the same bytes. A delta row without it
//! (a trace Dynamo's users wrote) gets fresh ids there.
//!
//! Both ways run in input order with per-session state: `--to-delta` keeps
//! a hash of each session's kept prefix (memory O(sessions)),
//! `--from-delta` the prefix ids themselves (O(sum of session contexts)).

use std::collections::HashMap;

use crate::blocks::blocks_for;
use crate::error::RecordError;
use crate::filter::{Ctx, Emit, Step};
use crate::hash::splitmix64;
use crate::record::{self, Edit, Field, Number, Record};

/// The field that carries the full form's ids a delta row has no place for.
pub const CONTEXT_IDS: &str = "context_ids";

/// First id `--from-delta` mints for a context it is not given (mc-cap's
/// base: far above real traces' ids, below 2^53).
pub const FRESH_ID_BASE: u64 = super::cap::DEFAULT_FRESH_ID_BASE;

/// Which way a trace is converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Full (cumulative) rows to Dynamo's delta rows.
    ToDelta,
    /// Delta rows to full rows.
    FromDelta,
}

/// What a session's next turn needs of its previous one.
#[derive(Debug, Default)]
struct Turn {
    /// The previous prompt's and answer's tokens.
    input: u64,
    output: u64,
    /// The previous prompt's full blocks: how many ids a next turn keeps.
    keep: usize,
    /// `--to-delta`: the kept ids' hash (a check needs no more).
    hash: u64,
    /// `--from-delta`: the kept ids (a full row is written from them).
    ids: Vec<u64>,
    /// The session's id-list spacing (`[1,2]` or `[1, 2]`), once a list
    /// with two ids showed it: a one-id delta list cannot.
    compact: Option<bool>,
}

/// Counts for the summary line.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeltaCounts {
    /// Sessions met (rows with a `session_id`).
    pub sessions: u64,
    /// Later turns converted.
    pub turns: u64,
    /// Ids minted for delta rows without `context_ids`.
    pub minted: u64,
    /// `--from-delta`: later turns whose ids start with the session's kept
    /// prefix, as a full row's do (the input may be in full form already).
    pub look_full: u64,
}

/// The conversion, one row at a time in input order.
pub struct DeltaStep {
    dir: Direction,
    b: u64,
    /// foldhash's fixed hasher: SipHash was 4% of `--to-delta`'s
    /// instructions (cachegrind).
    sessions: HashMap<Box<[u8]>, Turn, foldhash::fast::FixedState>,
    pub counts: DeltaCounts,
    next_fresh: u64,
    /// The largest id read so far, and whether any id was minted: an input
    /// id in the minted range is refused either way round.
    max_id: u64,
    ids: Vec<u64>,
    ctx: Vec<u64>,
    full: Vec<u64>,
    text: [Vec<u8>; 3],
    /// Built once: `memmem::find` builds one a call (5% of the run).
    finder: memchr::memmem::Finder<'static>,
}

impl DeltaStep {
    pub fn new(dir: Direction, b: u64) -> Self {
        DeltaStep {
            dir,
            b: b.max(1),
            sessions: HashMap::default(),
            counts: DeltaCounts::default(),
            next_fresh: FRESH_ID_BASE,
            max_id: 0,
            ids: Vec::new(),
            ctx: Vec::new(),
            full: Vec::new(),
            text: Default::default(),
            finder: memchr::memmem::Finder::new(b"\"context_ids\""),
        }
    }

    /// The summary line's text.
    pub fn note(&self) -> String {
        let c = &self.counts;
        let (verb, form) = match self.dir {
            Direction::ToDelta => ("written as deltas", "delta"),
            Direction::FromDelta => ("made full", "full"),
        };
        let mut s = format!(
            "{} later turns of {} sessions {verb} ({form} form, block size {})",
            c.turns, c.sessions, self.b
        );
        if c.look_full > 0 {
            s.push_str(&format!(
                "; {} later turns' hash_ids start with their session's previous full blocks, \
                 as full rows' do: is the input in full form already?",
                c.look_full
            ));
        }
        if c.minted > 0 {
            s.push_str(&format!(
                "; {} ids minted from {FRESH_ID_BASE} up for turns without `{CONTEXT_IDS}`",
                c.minted
            ));
        }
        s
    }

    fn convert(
        &mut self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        refuse_graph_rows(rec, self.dir)?;
        let has_context = self.finder.find(rec.line()).is_some();
        let Some(sid) = rec.session_id()? else {
            // A row without a session is a session of its own (Dynamo's
            // reader names it after its line): the same in both forms.
            return Ok(Emit::Unchanged);
        };
        let (isl, osl) = self.read_turn(rec, has_context)?;
        let b = self.b;
        let style = id_style(rec.raw(Field::HashIds));
        let Some(prev) = self.sessions.get_mut(sid) else {
            // A first turn is its whole prompt in both forms.
            self.counts.sessions += 1;
            let mut t = Turn {
                compact: style,
                ..Turn::default()
            };
            remember(&mut t, self.dir, isl, osl, &self.ids, b, (0, 0));
            self.sessions.insert(sid.into(), t);
            return Ok(Emit::Unchanged);
        };
        if prev.compact.is_none() {
            prev.compact = style;
        }
        let context = prev.input.checked_add(prev.output).ok_or_else(|| {
            RecordError::field("input_length", "the session's context overflows 64 bits")
        })?;
        let keep = prev.keep;
        match self.dir {
            Direction::ToDelta => {
                let parts = split_delta(&self.ids, prev, isl, context, b)?;
                write_delta_row(rec, out, &mut self.text, &self.ids, &parts);
                let so_far = (keep, parts.kept_hash);
                remember(prev, self.dir, isl, osl, &self.ids, b, so_far);
            }
            Direction::FromDelta => {
                let m = self.ids.len();
                check_delta_ids(m, isl, b)?;
                if keep > 0 && self.ids.get(..keep) == Some(&prev.ids[..keep]) {
                    self.counts.look_full += 1;
                }
                let full_len = full_prompt_len(context, isl)?;
                let (member, ctx_style) = self.read_context_ids(rec, has_context)?;
                if member.is_some() {
                    self.note_ctx_ids()?;
                } else {
                    let n = blocks_for(full_len, b).saturating_sub((keep + m) as u64);
                    self.mint(n)?;
                }
                let prev = self.sessions.get_mut(sid).expect("looked up above");
                if prev.compact.is_none() {
                    prev.compact = ctx_style;
                }
                let full = &mut self.full;
                full.clear();
                full.extend_from_slice(&prev.ids[..keep]);
                full.extend_from_slice(&self.ctx);
                full.extend_from_slice(&self.ids);
                let compact = list_spacing(prev.compact, rec);
                let full_row = FullRow {
                    ids: full,
                    len: full_len,
                    compact,
                    member,
                };
                write_full_row(rec, out, &mut self.text, full_row);
                let full = std::mem::take(&mut self.full);
                remember(prev, self.dir, full_len, osl, &full, b, (0, 0));
                self.full = full;
            }
        }
        self.counts.turns += 1;
        Ok(Emit::Written)
    }

    /// The turn's prompt and answer lengths, with its ids read into
    /// `self.ids`; refuses a row neither way can convert.
    fn read_turn(
        &mut self,
        rec: &Record<'_>,
        has_context: bool,
    ) -> std::result::Result<(u64, u64), RecordError> {
        let isl = need(rec.uint(Field::InputLength)?, "input_length")?;
        let osl = need(rec.uint(Field::OutputLength)?, "output_length")?;
        if !rec.hash_ids_into(&mut self.ids)? {
            return Err(RecordError::field(
                "hash_ids",
                "missing; a turn of a session needs its ids to be converted",
            ));
        }
        self.note_ids(self.dir == Direction::FromDelta)?;
        if self.dir == Direction::ToDelta && has_context {
            return Err(RecordError::field(
                CONTEXT_IDS,
                "already present: is the input already in delta form? (--from-delta reads it)",
            ));
        }
        Ok((isl, osl))
    }

    /// `--from-delta`: the row's `context_ids` member, if it has one, read
    /// into `self.ctx` (cleared either way), and its list spacing.
    fn read_context_ids(
        &mut self,
        rec: &Record<'_>,
        has_context: bool,
    ) -> std::result::Result<(Option<Member>, Option<bool>), RecordError> {
        self.ctx.clear();
        let mut ctx_style = None;
        // Found once, in the line: its place in the written row is
        // found by the edits' shifts (`shifted`).
        let member = if has_context {
            find_member(rec.line(), CONTEXT_IDS.as_bytes())
        } else {
            None
        };
        if let Some(member) = &member {
            let raw = &rec.line()[member.value.clone()];
            ctx_style = id_style(Some(raw));
            record::read_id_array(raw, 0, &mut self.ctx)
                .filter(|&end| end == raw.len())
                .ok_or_else(|| {
                    RecordError::field(CONTEXT_IDS, "expected an array of non-negative integers")
                })?;
        }
        Ok((member, ctx_style))
    }

    /// Records the row's largest id; an id in the minted range after ids
    /// were minted would name two blocks.
    fn note_ids(&mut self, from_delta: bool) -> std::result::Result<(), RecordError> {
        if !from_delta {
            return Ok(());
        }
        let max = self.ids.iter().copied().max().unwrap_or(0);
        self.note_max(max, "hash_ids")
    }

    fn note_ctx_ids(&mut self) -> std::result::Result<(), RecordError> {
        let max = self.ctx.iter().copied().max().unwrap_or(0);
        self.note_max(max, CONTEXT_IDS)
    }

    fn note_max(&mut self, max: u64, field: &str) -> std::result::Result<(), RecordError> {
        self.max_id = self.max_id.max(max);
        if self.next_fresh > FRESH_ID_BASE && max >= FRESH_ID_BASE {
            return Err(in_fresh_range(field, max));
        }
        Ok(())
    }

    /// `n` fresh ids into `self.ctx`.
    fn mint(&mut self, n: u64) -> std::result::Result<(), RecordError> {
        if n == 0 {
            return Ok(());
        }
        if self.max_id >= FRESH_ID_BASE {
            return Err(in_fresh_range("hash_ids", self.max_id));
        }
        for _ in 0..n {
            self.ctx.push(self.next_fresh);
            self.next_fresh += 1;
        }
        self.counts.minted += n;
        Ok(())
    }
}

fn in_fresh_range(field: &str, id: u64) -> RecordError {
    RecordError::field(
        field,
        format!(
            "id {id} is in the range --from-delta mints ids in for turns without \
             `{CONTEXT_IDS}` (>= {FRESH_ID_BASE}); give every later turn its `{CONTEXT_IDS}`"
        ),
    )
}

/// The conversion needs the input in order: per-session state.
impl Step for DeltaStep {
    fn apply(
        &mut self,
        rec: &Record<'_>,
        cx: &Ctx,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        if !cx.in_order() {
            return Ok(Emit::InOrder);
        }
        self.convert(rec, out)
    }

    fn fork(&self) -> Self {
        DeltaStep::new(self.dir, self.b)
    }

    /// Forks only answer `InOrder`: they hold nothing.
    fn join(&mut self, _fork: Self) {}
}

/// `--to-delta`: how a later turn's full-form ids split, once checked to
/// extend the session's context.
struct DeltaParts {
    /// The new tokens.
    new: u64,
    /// Ids kept from the previous turn's full blocks, and their hash.
    keep: usize,
    kept_hash: u64,
    /// Ids naming the new tokens (the row's delta `hash_ids`, the last ones).
    m: usize,
    /// Ids the way back would mint were `context_ids` left out.
    minted: u64,
}

/// Checks that a later turn extends its session's context (the only turn
/// the delta form can say) and splits its ids.
fn split_delta(
    ids: &[u64],
    prev: &Turn,
    isl: u64,
    context: u64,
    b: u64,
) -> std::result::Result<DeltaParts, RecordError> {
    let keep = prev.keep;
    let new = isl.checked_sub(context).ok_or_else(|| {
        RecordError::field(
            "input_length",
            format!(
                "{isl} tokens is less than the session's previous prompt and answer \
                 ({} + {} tokens): this turn does not extend its context, which \
                 the delta form cannot say (Dynamo appends every later turn)",
                prev.input, prev.output
            ),
        )
    })?;
    let kept_hash = ids.get(..keep).map(|k| hash_from(0, k));
    if kept_hash != Some(prev.hash) {
        return Err(RecordError::field(
            "hash_ids",
            format!(
                "do not start with the {keep} ids of the previous turn's full blocks \
                 (block size {b}): this turn does not extend its session's context, \
                 which the delta form cannot say"
            ),
        ));
    }
    let m = blocks_for(new, b) as usize;
    if ids.len() - keep < m {
        return Err(RecordError::field(
            "hash_ids",
            format!(
                "{} ids after the previous turn's {keep} full blocks, fewer than the \
                 {m} the {new} new tokens need at block size {b} (check --block-size)",
                ids.len() - keep
            ),
        ));
    }
    let minted = blocks_for(isl, b).saturating_sub((keep + m) as u64);
    Ok(DeltaParts {
        new,
        keep,
        kept_hash: kept_hash.unwrap_or(0),
        m,
        minted,
    })
}

/// Writes the delta row: the new tokens and their ids, and the ids between
/// in `context_ids` when the way back needs them.
fn write_delta_row(
    rec: &Record<'_>,
    out: &mut Vec<u8>,
    text: &mut [Vec<u8>; 3],
    ids: &[u64],
    parts: &DeltaParts,
) {
    let [len_text, ids_text, ctx_text] = text;
    len_text.clear();
    ids_text.clear();
    ctx_text.clear();
    let keep = parts.keep;
    let (ctx, delta) = ids[keep..].split_at(ids.len() - keep - parts.m);
    record::write_number(Number::UInt(parts.new), len_text);
    record::write_id_array_like(delta, rec.raw(Field::HashIds), ids_text);
    // Without the field the way back mints `minted` ids: written
    // unless that gives these ids (none).
    if !(ctx.is_empty() && parts.minted == 0) {
        record::write_id_array_like(ctx, rec.raw(Field::HashIds), ctx_text);
    }
    let mut edits = length_and_ids(len_text, ids_text);
    let mark = out.len();
    rec.write_edited(&mut edits, out);
    if !ctx_text.is_empty() {
        append_member(out, mark, CONTEXT_IDS, ctx_text);
    }
}

/// `--from-delta`: checks a delta turn names its new tokens as Dynamo's
/// rule says.
fn check_delta_ids(m: usize, isl: u64, b: u64) -> std::result::Result<(), RecordError> {
    if m as u64 != blocks_for(isl, b) {
        return Err(RecordError::field(
            "hash_ids",
            format!(
                "{m} ids for {isl} new tokens; a delta turn names its new tokens \
                 with exactly ceil({isl} / {b}) = {} ids (Dynamo's rule; check \
                 --block-size, or is the input in full form?)",
                blocks_for(isl, b)
            ),
        ));
    }
    Ok(())
}

/// `--from-delta`: the full prompt's tokens, the session's context and the
/// new ones, within the token limit.
fn full_prompt_len(context: u64, isl: u64) -> std::result::Result<u64, RecordError> {
    let full_len = context
        .checked_add(isl)
        .ok_or_else(|| RecordError::field("input_length", "overflows 64 bits"))?;
    crate::limits::tokens("input_length", full_len)
        .map_err(|e| RecordError::new(format!("the session's full prompt: {}", e.0)))?;
    Ok(full_len)
}

/// Whether a full row's list is written `[1,2]`: the session's spacing, or
/// when no list of the session showed it, the row's own (`"hash_ids":[`
/// is a compact row).
fn list_spacing(session: Option<bool>, rec: &Record<'_>) -> bool {
    session.unwrap_or_else(|| {
        rec.span(Field::HashIds)
            .is_some_and(|sp| rec.line()[..sp.start].ends_with(b":"))
    })
}

/// `--from-delta`: what the full row is written from.
struct FullRow<'a> {
    ids: &'a [u64],
    len: u64,
    compact: bool,
    /// The delta row's `context_ids`, dropped from the full row.
    member: Option<Member>,
}

/// Writes the full row: its whole prompt's length and ids, without the
/// delta row's `context_ids`.
fn write_full_row(rec: &Record<'_>, out: &mut Vec<u8>, text: &mut [Vec<u8>; 3], row: FullRow<'_>) {
    let [len_text, ids_text, _] = text;
    len_text.clear();
    ids_text.clear();
    record::write_number(Number::UInt(row.len), len_text);
    let like: &[u8] = if row.compact { b"[1,2]" } else { b"[1, 2]" };
    record::write_id_array_like(row.ids, Some(like), ids_text);
    let mut edits = length_and_ids(len_text, ids_text);
    let mark = out.len();
    rec.write_edited(&mut edits, out);
    if let Some(member) = row.member {
        let at = mark + shifted(rec, &edits, member.remove.start);
        out.drain(at..at + member.remove.len());
    }
}

fn need(v: Option<u64>, field: &str) -> std::result::Result<u64, RecordError> {
    v.ok_or_else(|| {
        RecordError::field(
            field,
            "missing; a turn of a session needs it to be converted",
        )
    })
}

/// Agent-graph calls are not a chain of turns: Dynamo reads them as its
/// `agentic_mooncake` format, the rows as they are. Dynamo's delta reader
/// ignores a `request_id` (its own delta tests carry one), so
/// `--from-delta` takes one without edges; `--to-delta` does not, as a
/// `request_id` makes a session a graph here (docs/format.md).
fn refuse_graph_rows(rec: &Record<'_>, dir: Direction) -> std::result::Result<(), RecordError> {
    let named = match dir {
        Direction::ToDelta => Some(Field::RequestId),
        Direction::FromDelta => None,
    };
    for f in [Field::WaitFor, Field::Branches, Field::PrefixReset]
        .into_iter()
        .chain(named)
    {
        if rec.has(f) {
            return Err(RecordError::field(
                f.name(),
                "an agent-graph call; the delta form is a chain of turns per session \
                 (Dynamo reads graph rows as `agentic_mooncake`: leave them as they are)",
            ));
        }
    }
    Ok(())
}

/// Sets `t` from this turn: what the next turn of its session keeps.
/// `so_far` is the hash of the first ids, already hashed for the check
/// (`--to-delta`: the kept ids only grow, so one pass hashes each once).
fn remember(
    t: &mut Turn,
    dir: Direction,
    isl: u64,
    osl: u64,
    ids: &[u64],
    b: u64,
    so_far: (usize, u64),
) {
    t.input = isl;
    t.output = osl;
    t.keep = ((isl / b) as usize).min(ids.len());
    match dir {
        Direction::ToDelta => {
            let (n, h) = if so_far.0 <= t.keep { so_far } else { (0, 0) };
            t.hash = hash_from(h, &ids[n..t.keep]);
        }
        Direction::FromDelta => {
            t.ids.clear();
            t.ids.extend_from_slice(&ids[..t.keep]);
        }
    }
}

/// A hash of an id list continued from `h` (0 for the empty list), so
/// `--to-delta` checks a prefix without holding it. The kept count is
/// stored beside it, so lists of two lengths are never compared.
fn hash_from(mut h: u64, ids: &[u64]) -> u64 {
    for &id in ids {
        h = splitmix64(h ^ id);
    }
    h
}

/// `Some(true)` for `[1,2]`, `Some(false)` for `[1, 2]`, `None` when the
/// list has under two ids (its spacing shows nothing).
fn id_style(raw: Option<&[u8]>) -> Option<bool> {
    let raw = raw?;
    raw.contains(&b',')
        .then(|| !raw.windows(2).any(|w| w == b", "))
}

/// A top-level member of a JSON object line: the bytes that remove it
/// (with one comma) and its value.
#[derive(Debug, PartialEq)]
pub struct Member {
    pub remove: std::ops::Range<usize>,
    pub value: std::ops::Range<usize>,
}

/// Finds the top-level member `key` of the object in `line` (a line the
/// record scanner accepted, so valid JSON). A key written with escapes is
/// not matched.
pub fn find_member(line: &[u8], key: &[u8]) -> Option<Member> {
    let mut i = line.iter().position(|&c| c == b'{')? + 1;
    let mut prev_end: Option<usize> = None;
    loop {
        i = skip_ws(line, i);
        match *line.get(i)? {
            b'}' => return None,
            b',' => i = skip_ws(line, i + 1),
            _ => {}
        }
        let key_start = i;
        let key_end = skip_string(line, i)?;
        let k = line.get(key_start + 1..key_end - 1)?;
        i = skip_ws(line, key_end);
        if *line.get(i)? != b':' {
            return None;
        }
        let v_start = skip_ws(line, i + 1);
        let v_end = skip_value(line, v_start)?;
        if k == key {
            let remove = match prev_end {
                Some(p) => p..v_end,
                None => {
                    // The first member: it goes with the comma after it.
                    let j = skip_ws(line, v_end);
                    if line.get(j) == Some(&b',') {
                        key_start..skip_ws(line, j + 1)
                    } else {
                        key_start..v_end
                    }
                }
            };
            return Some(Member {
                remove,
                value: v_start..v_end,
            });
        }
        prev_end = Some(v_end);
        i = v_end;
    }
}

/// Where byte `at` of `rec`'s line (outside every edited span) is in the
/// row `write_edited` wrote with `edits`: moved by each edit before it.
fn shifted(rec: &Record<'_>, edits: &[Edit<'_>], at: usize) -> usize {
    let mut to = at as isize;
    for e in edits {
        if let Some(sp) = rec.span(e.field).filter(|sp| sp.start < at) {
            to += e.value.len() as isize - (sp.end - sp.start) as isize;
        }
    }
    to as usize
}

/// Appends `"key": value` after the last member of the object written
/// from `mark` on in `out` (so removing it from that member's end gives
/// the bytes back).
fn append_member(out: &mut Vec<u8>, mark: usize, key: &str, value: &[u8]) {
    let line = &out[mark..];
    let at = last_member_end(line).unwrap_or(line.len());
    let mut add = Vec::with_capacity(key.len() + value.len() + 6);
    add.extend_from_slice(b", \"");
    add.extend_from_slice(key.as_bytes());
    add.extend_from_slice(b"\": ");
    add.extend_from_slice(value);
    out.splice(mark + at..mark + at, add);
}

/// The end of the last member's value of the object in `line`: before
/// the closing `}` and the blanks before it (walking the row from the
/// front was 6% of `--to-delta`).
fn last_member_end(line: &[u8]) -> Option<usize> {
    let close = line.iter().rposition(|&c| c == b'}')?;
    let end = line[..close]
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))?;
    (line[end] != b'{').then_some(end + 1)
}

fn skip_ws(line: &[u8], mut i: usize) -> usize {
    while line
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// The index after the string starting at `i` (its opening quote).
fn skip_string(line: &[u8], i: usize) -> Option<usize> {
    if *line.get(i)? != b'"' {
        return None;
    }
    let mut j = i + 1;
    loop {
        match *line.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index after the value starting at `i`.
fn skip_value(line: &[u8], i: usize) -> Option<usize> {
    match *line.get(i)? {
        b'"' => skip_string(line, i),
        open @ (b'[' | b'{') => {
            // Only strings and this bracket's kind count: the other kind
            // nests inside it, whole. memchr jumps over the digits of a
            // long id list (byte by byte it was a fifth of `--from-delta`).
            let close = if open == b'[' { b']' } else { b'}' };
            let mut depth = 0usize;
            let mut j = i;
            loop {
                j += memchr::memchr3(b'"', open, close, line.get(j..)?)?;
                match line[j] {
                    b'"' => {
                        j = skip_string(line, j)?;
                        continue;
                    }
                    c if c == open => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while line
                .get(j)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// The two fields either direction rewrites: `input_length` and
/// `hash_ids`, to the texts given.
fn length_and_ids<'a>(len_text: &'a [u8], ids_text: &'a [u8]) -> [Edit<'a>; 2] {
    [
        Edit {
            field: Field::InputLength,
            value: len_text,
        },
        Edit {
            field: Field::HashIds,
            value: ids_text,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: Direction, b: u64, lines: &[&str]) -> Result<Vec<String>, String> {
        let mut step = DeltaStep::new(dir, b);
        let mut outs = Vec::new();
        for (k, l) in lines.iter().enumerate() {
            let rec = Record::parse(l.as_bytes()).map_err(|e| e.0)?;
            let mut out = Vec::new();
            match step
                .apply(&rec, &Ctx::in_order_at(k as u64), &mut out)
                .map_err(|e| format!("line {}: {}", k + 1, e.0))?
            {
                Emit::Unchanged => outs.push(l.to_string()),
                Emit::Written => outs.push(String::from_utf8(out).unwrap()),
                _ => unreachable!(),
            }
        }
        Ok(outs)
    }

    // A 3-turn session at block size 4, worked out by hand:
    // turn 1: 6 tokens [a a a a | a a], answer 3.
    // turn 2: 6 + 3 + 5 new = 14 tokens. Full blocks of turn 1: one (id 1),
    //   so ids 1, then 3 blocks for tokens 4..14: [1, 10, 11, 12].
    //   Delta: 5 new tokens -> ceil(5/4) = 2 ids (the last two: 11, 12);
    //   context ids (the partial block + answer): [10].
    // turn 3: 14 + 2 + 4 new = 20 tokens. Full blocks of turn 2: 3 (1, 10,
    //   11); then 2 blocks for 12..20: [1, 10, 11, 20, 21]. Delta: 4 new
    //   tokens -> 1 id (21); context [20].
    const FULL: [&str; 3] = [
        r#"{"session_id": "s", "input_length": 6, "output_length": 3, "hash_ids": [1, 2]}"#,
        r#"{"session_id": "s", "delay": 5, "input_length": 14, "output_length": 2, "hash_ids": [1, 10, 11, 12]}"#,
        r#"{"session_id": "s", "delay": 7, "input_length": 20, "output_length": 1, "hash_ids": [1, 10, 11, 20, 21]}"#,
    ];
    const DELTA: [&str; 3] = [
        r#"{"session_id": "s", "input_length": 6, "output_length": 3, "hash_ids": [1, 2]}"#,
        r#"{"session_id": "s", "delay": 5, "input_length": 5, "output_length": 2, "hash_ids": [11, 12], "context_ids": [10]}"#,
        r#"{"session_id": "s", "delay": 7, "input_length": 4, "output_length": 1, "hash_ids": [21], "context_ids": [20]}"#,
    ];

    #[test]
    fn a_three_turn_session_by_hand() {
        assert_eq!(run(Direction::ToDelta, 4, &FULL).unwrap(), DELTA);
        assert_eq!(run(Direction::FromDelta, 4, &DELTA).unwrap(), FULL);
    }

    #[test]
    fn a_delta_without_context_ids_gets_fresh_ones() {
        let bare: Vec<String> = DELTA
            .iter()
            .map(|l| {
                l.replace(", \"context_ids\": [10]", "")
                    .replace(", \"context_ids\": [20]", "")
            })
            .collect();
        let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
        let full = run(Direction::FromDelta, 4, &bare).unwrap();
        let f = FRESH_ID_BASE;
        assert!(
            full[1].contains(&format!(
                "\"input_length\": 14, \"output_length\": 2, \"hash_ids\": [1, {f}, 11, 12]}}"
            )),
            "{}",
            full[1]
        );
        assert!(
            full[2].contains(&format!("\"hash_ids\": [1, {f}, 11, {}, 21]}}", f + 1)),
            "{}",
            full[2]
        );
    }

    #[test]
    fn a_turn_that_does_not_extend_its_context_is_named() {
        let mut rows = FULL;
        // Turn 2 forgets turn 1's first block.
        rows[1] = r#"{"session_id": "s", "input_length": 14, "output_length": 2, "hash_ids": [9, 10, 11, 12]}"#;
        let e = run(Direction::ToDelta, 4, &rows).unwrap_err();
        assert!(
            e.starts_with("line 2: field `hash_ids`: do not start with the 1 ids"),
            "{e}"
        );
        rows[1] =
            r#"{"session_id": "s", "input_length": 8, "output_length": 2, "hash_ids": [1, 10]}"#;
        let e = run(Direction::ToDelta, 4, &rows).unwrap_err();
        assert!(
            e.starts_with("line 2: field `input_length`: 8 tokens is less than"),
            "{e}"
        );
    }

    #[test]
    fn graph_rows_and_delta_input_are_refused() {
        let g = [
            r#"{"session_id": "s", "request_id": "a", "input_length": 4, "output_length": 1, "hash_ids": [1]}"#,
        ];
        let e = run(Direction::ToDelta, 4, &g).unwrap_err();
        assert!(
            e.starts_with("line 1: field `request_id`: an agent-graph call"),
            "{e}"
        );
        let e = run(Direction::ToDelta, 4, &DELTA).unwrap_err();
        assert!(
            e.starts_with("line 2: field `context_ids`: already present"),
            "{e}"
        );
        // Full rows read as deltas: each row is a valid delta, but its ids
        // start with the previous turn's blocks, which the note names.
        let mut step = DeltaStep::new(Direction::FromDelta, 4);
        for (k, l) in FULL.iter().enumerate() {
            let rec = Record::parse(l.as_bytes()).unwrap();
            step.apply(&rec, &Ctx::in_order_at(k as u64), &mut Vec::new())
                .unwrap();
        }
        assert_eq!(step.counts.look_full, 1);
        assert!(step.note().contains("is the input in full form already?"));
        let bad = [
            FULL[0],
            r#"{"session_id": "s", "input_length": 5, "output_length": 1, "hash_ids": [7]}"#,
        ];
        let e = run(Direction::FromDelta, 4, &bad).unwrap_err();
        assert!(
            e.starts_with("line 2: field `hash_ids`: 1 ids for 5 new tokens"),
            "{e}"
        );
    }

    #[test]
    fn members_are_found_and_removed_with_one_comma() {
        let line = br#"{"a": [1, {"x": "}"}], "context_ids": [3,4] , "b": 2}"#;
        let m = find_member(line, b"context_ids").unwrap();
        assert_eq!(&line[m.value.clone()], b"[3,4]");
        let mut s = line.to_vec();
        s.drain(m.remove);
        assert_eq!(s, br#"{"a": [1, {"x": "}"}] , "b": 2}"#);
        let first = br#"{ "context_ids": [], "b": 2}"#;
        let m = find_member(first, b"context_ids").unwrap();
        let mut s = first.to_vec();
        s.drain(m.remove);
        assert_eq!(s, br#"{ "b": 2}"#);
        assert_eq!(
            find_member(br#"{"b": "\"context_ids\": 1"}"#, b"context_ids"),
            None
        );
    }

    #[test]
    fn compact_rows_stay_compact() {
        let full = [
            r#"{"session_id":"s","input_length":6,"output_length":3,"hash_ids":[1,2]}"#,
            r#"{"session_id":"s","input_length":10,"output_length":2,"hash_ids":[1,10,11]}"#,
        ];
        let delta = run(Direction::ToDelta, 4, &full).unwrap();
        assert_eq!(
            delta[1],
            r#"{"session_id":"s","input_length":1,"output_length":2,"hash_ids":[11], "context_ids": [10]}"#
        );
        let back = run(
            Direction::FromDelta,
            4,
            &delta.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(back, full);
    }
}
