//! Sessions recognised by accumulated history: a request whose messages
//! start with all the messages of an earlier request, followed by that
//! request's answer, is its next turn.
//!
//! Messages are compared by hashes of their prefixes (`prefix[k]` names
//! the first k+1 messages), so the whole history is never kept. The rule,
//! for requests in time order:
//!
//! 1. The longest earlier request E whose messages plus its logged answer
//!    (`{"role": "assistant", "content": answer}`) begin this request's
//!    messages.
//! 2. Else the longest earlier request whose messages begin this one's,
//!    followed here by an assistant message (the answer as the client kept
//!    it: trimmed, or with fields the log does not show).
//!
//! Among equal candidates (two users who sent the same first message) the
//! latest that is still the last turn of its session wins. A request that
//! extends a turn which already has a next turn (a regenerated answer, an
//! edited message) starts a session of its own: a session's turns are a
//! chain, each row's prompt the one before plus new messages, which is
//! what `session_id` promises to `mc-replay --turns delta` and AIPerf.

use std::collections::HashMap;

use crate::hash::stable_hash;

/// One message's hash: its JSON with object keys sorted and null fields
/// left out (a client that echoes `"tool_calls": null` sent the same message).
pub fn message_hash(msg: &serde_json::Value) -> u64 {
    let mut bytes = Vec::new();
    canonical(msg, &mut bytes);
    stable_hash(0x6d63_7472_6163_6521, &bytes)
}

fn canonical(v: &serde_json::Value, out: &mut Vec<u8>) {
    match v {
        serde_json::Value::Object(o) => {
            // serde_json's map keeps keys sorted (no `preserve_order`).
            out.push(b'{');
            for (k, x) in o.iter().filter(|(_, x)| !x.is_null()) {
                out.extend_from_slice(k.as_bytes());
                out.push(b':');
                canonical(x, out);
                out.push(b',');
            }
            out.push(b'}');
        }
        serde_json::Value::Array(a) => {
            out.push(b'[');
            for x in a {
                canonical(x, out);
                out.push(b',');
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// The hash of a prefix one message longer than `prefix`.
pub fn extend(prefix: u64, message: u64) -> u64 {
    stable_hash(prefix, &message.to_le_bytes())
}

/// What session detection needs of one request.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// `prefix[k]`: the hash of messages `0..=k`.
    pub prefix: Vec<u64>,
    /// Whether message k is the assistant's.
    pub assistant: Vec<bool>,
    /// The hash of all messages plus the logged answer, when the log has one.
    pub answered: Option<u64>,
}

impl History {
    /// The history of `messages` (a JSON list), answered by `answer`.
    pub fn of(messages: &[serde_json::Value], answer: Option<&str>) -> History {
        let mut h = History::default();
        let mut p = 0;
        for m in messages {
            p = extend(p, message_hash(m));
            h.prefix.push(p);
            h.assistant
                .push(m.get("role").and_then(|r| r.as_str()) == Some("assistant"));
        }
        if let Some(a) = answer {
            h.answer(a);
        }
        h
    }

    /// Records the logged answer to these messages.
    pub fn answer(&mut self, text: &str) {
        let p = self.prefix.last().copied().unwrap_or(0);
        let msg = serde_json::json!({"role": "assistant", "content": text});
        self.answered = Some(extend(p, message_hash(&msg)));
    }
}

/// Sessions of requests given in time order.
#[derive(Debug, Default)]
pub struct Assigned {
    /// `session[i]`: request i's session, numbered from 0 in order of first turn.
    pub session: Vec<u32>,
    /// Requests that extend a turn already continued (each starts a session).
    pub forks: u64,
}

/// Assigns sessions to requests given in time order.
pub fn assign<'a>(requests: impl IntoIterator<Item = &'a History>) -> Assigned {
    // Full message lists, and lists plus answers, to the requests with them.
    let mut full: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut answered: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut session: Vec<u32> = Vec::new();
    let mut forks = 0;
    // The last turn of each session so far.
    let mut tail: Vec<usize> = Vec::new();
    for (i, r) in requests.into_iter().enumerate() {
        let open = |cands: Option<&Vec<usize>>| {
            cands.and_then(|c| {
                c.iter()
                    .rev()
                    .copied()
                    .find(|&e| tail[session[e] as usize] == e)
            })
        };
        let m = r.prefix.len();
        let mut parent = None;
        let mut extends_something = false;
        // Prefixes shorter than the request, longest first.
        for k in (0..m.saturating_sub(1)).rev() {
            let exact = answered.get(&r.prefix[k]);
            let kept = full
                .get(&r.prefix[k])
                .filter(|_| r.assistant.get(k + 1) == Some(&true));
            if exact.is_none() && kept.is_none() {
                continue;
            }
            extends_something = true;
            parent = open(exact).or_else(|| open(kept));
            break;
        }
        let s = match parent {
            Some(e) => session[e],
            None => {
                // A new conversation, or a fork of one: either way the
                // start of a chain of its own.
                forks += u64::from(extends_something);
                tail.push(i);
                (tail.len() - 1) as u32
            }
        };
        tail[s as usize] = i;
        session.push(s);
        if let Some(&last) = r.prefix.last() {
            full.entry(last).or_default().push(i);
        }
        if let Some(a) = r.answered {
            answered.entry(a).or_default().push(i);
        }
    }
    Assigned { session, forks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(role: &str, content: &str) -> serde_json::Value {
        json!({"role": role, "content": content})
    }

    #[test]
    fn turns_chain_by_history_and_answer() {
        let sys = msg("system", "S");
        let a1 = [sys.clone(), msg("user", "hi")];
        // Two users open with the same messages and get different answers.
        let r0 = History::of(&a1, Some("A"));
        let r1 = History::of(&a1, Some("B"));
        // Each one's next turn carries its own answer.
        let r2 = History::of(
            &[
                sys.clone(),
                msg("user", "hi"),
                msg("assistant", "B"),
                msg("user", "more"),
            ],
            Some("C"),
        );
        let r3 = History::of(
            &[
                sys.clone(),
                msg("user", "hi"),
                msg("assistant", "A"),
                msg("user", "again"),
            ],
            None,
        );
        // An answer the client trimmed still continues (rule 2): r3 has
        // no logged answer, so any assistant message after it does.
        let r4 = History::of(
            &[
                sys.clone(),
                msg("user", "hi"),
                msg("assistant", "A"),
                msg("user", "again"),
                msg("assistant", "whatever"),
                msg("user", "x"),
            ],
            None,
        );
        // Another user: the system prompt alone is not a turn of anyone.
        let r5 = History::of(&[sys.clone(), msg("user", "other")], None);
        let a = assign([&r0, &r1, &r2, &r3, &r4, &r5]);
        assert_eq!(a.session, [0, 1, 1, 0, 0, 2]);
        assert_eq!(a.forks, 0);
    }

    #[test]
    fn a_fork_starts_its_own_session() {
        let first = History::of(&[msg("user", "q")], Some("a"));
        let next = History::of(
            &[msg("user", "q"), msg("assistant", "a"), msg("user", "one")],
            None,
        );
        // The same turn answered again, continued another way.
        let fork = History::of(
            &[msg("user", "q"), msg("assistant", "a"), msg("user", "two")],
            None,
        );
        let a = assign([&first, &next, &fork]);
        assert_eq!(a.session, [0, 0, 1]);
        assert_eq!(a.forks, 1);
    }

    #[test]
    fn null_fields_do_not_change_a_message() {
        assert_eq!(
            message_hash(&json!({"role": "assistant", "content": "A", "tool_calls": null})),
            message_hash(&msg("assistant", "A"))
        );
        assert_ne!(
            message_hash(&msg("user", "A")),
            message_hash(&msg("user", "B"))
        );
    }
}
