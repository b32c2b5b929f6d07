//! mc-import --from chat on chat logs built here by hand, with a word-level
//! tokenizer (one token per word) and a template whose every piece is a
//! word, so each length and block below is counted from the text.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::util;

/// Every word of the logs below: a known word is its own token, so two
/// texts share token ids only where they share words.
const VOCAB: &[&str] = &[
    "<s>",
    "<system>",
    "<user>",
    "<assistant>",
    "you",
    "are",
    "a",
    "helpful",
    "bot",
    "hello",
    "there",
    "good",
    "morning",
    "hi",
    "alice",
    "hey",
    "bob",
    "what",
    "time",
    "tell",
    "me",
    "more",
    "it",
    "is",
    "noon",
    "some",
    "words",
    "here",
];

/// `<s>`, then `<role> content` per message, then `<assistant>` (the
/// generation prompt): a prompt of n messages is 1 + Σ(1 + words) + 1 tokens.
const TEMPLATE: &str = "{{ bos_token }} {% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

/// A tokenizer folder: tokenizer.json and a tokenizer_config.json with
/// the template and `<s>` as bos.
fn tokenizer(dir: &Path, template: &str) -> PathBuf {
    let folder = dir.join("tok");
    std::fs::create_dir_all(&folder).unwrap();
    util::word_tokenizer(&folder, VOCAB);
    let config = json!({
        "bos_token": {"__type": "AddedToken", "content": "<s>"},
        "eos_token": "</s>",
        "chat_template": template,
    });
    util::write_file(&folder, "tokenizer_config.json", &config.to_string());
    folder
}

fn msg(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

const SYS: &str = "you are a helpful bot";

/// A LiteLLM StandardLoggingPayload line (the fields mc-import reads, and
/// a few it must ignore).
fn litellm(start: f64, messages: Vec<Value>, answer: &str, completion: Option<u64>) -> Value {
    let mut v = json!({
        "id": "chatcmpl-x", "call_type": "acompletion", "status": "success",
        "model": "secret-model-name", "startTime": start, "endTime": start + 1.0,
        "messages": messages,
        "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
        "model_parameters": {"temperature": 0.2},
        "end_user": "alice@example.com",
    });
    if let Some(n) = completion {
        v["completion_tokens"] = json!(n);
        v["prompt_tokens"] = json!(999);
    }
    v
}

/// Three users, one system prompt: Alice and Bob open with the same
/// message and get different answers; each one's next turn carries its own
/// answer; Carol says something else. LiteLLM logs a call when it ends, so
/// the lines are not in start order.
fn three_users() -> String {
    let sys = || msg("system", SYS);
    let a1 = litellm(
        1000.0,
        vec![sys(), msg("user", "hello there")],
        "hi alice",
        Some(2),
    );
    let b1 = litellm(
        1002.5,
        vec![sys(), msg("user", "hello there")],
        "hey bob",
        Some(2),
    );
    let c1 = litellm(
        1003.0,
        vec![sys(), msg("user", "good morning")],
        "x",
        Some(5),
    );
    // No usage: the answer's three words are its length.
    let b2 = litellm(
        1010.0,
        vec![
            sys(),
            msg("user", "hello there"),
            msg("assistant", "hey bob"),
            msg("user", "what time"),
        ],
        "it is noon",
        None,
    );
    let a2 = litellm(
        1005.0,
        vec![
            sys(),
            msg("user", "hello there"),
            msg("assistant", "hi alice"),
            msg("user", "tell me more"),
        ],
        "some more words here",
        Some(4),
    );
    util::lines(&[c1, a1, b2, b1, a2])
}

fn rows(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn three_users_rows_sessions_ids_and_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), TEMPLATE);
    let args = ["--from", "chat", "--block-size", "4", "--tokenizer"];
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    all.push(tok.as_os_str());
    let (out, err) = util::run_ok_both("mc-import", &all, &three_users());
    let got = rows(&out);
    // By start time: A1 1000.0, B1 1002.5, C1 1003.0, A2 1005.0, B2 1010.0.
    let ts: Vec<u64> = got
        .iter()
        .map(|r| r["timestamp"].as_u64().unwrap())
        .collect();
    assert_eq!(ts, [0, 2500, 3000, 5000, 10000]);
    // A1 and B1 are two users (same messages, nothing extended); A2 extends
    // A1 with Alice's answer (B1, the latest request it extends without
    // the answer, is not its turn), B2 extends B1 with Bob's.
    let sessions: Vec<&str> = got
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, ["0", "1", "2", "0", "1"]);
    // <s> <system> 5 words <user> 2 words <assistant> = 11; A2 adds
    // <assistant> hi alice <user> tell me more = 7 (18); B2 adds
    // <assistant> hey bob <user> what time = 6 (17).
    let input: Vec<u64> = got
        .iter()
        .map(|r| r["input_length"].as_u64().unwrap())
        .collect();
    assert_eq!(input, [11, 11, 11, 18, 17]);
    // Usage where logged; B2's from its answer's three words.
    let output: Vec<u64> = got
        .iter()
        .map(|r| r["output_length"].as_u64().unwrap())
        .collect();
    assert_eq!(output, [2, 2, 5, 4, 3]);
    // Blocks of 4: [<s> <system> you are] [a helpful bot <user>] shared by
    // all; then A1/B1 [hello there <assistant>] (2), C1 [good morning
    // <assistant>] (3), A2 [hello there <assistant> hi] [alice <user> tell
    // me] [more <assistant>] (4, 5, 6), B2 [hello there <assistant> hey]
    // [bob <user> what time] [<assistant>] (7, 8, 9).
    let ids: Vec<Vec<u64>> = got.iter().map(util::ids).collect();
    assert_eq!(
        ids,
        [
            vec![0, 1, 2],
            vec![0, 1, 2],
            vec![0, 1, 3],
            vec![0, 1, 4, 5, 6],
            vec![0, 1, 7, 8, 9]
        ]
    );
    assert!(err.contains("chat: 5 rows in, 5 rows out"), "{err}");
    assert!(err.contains("3 sessions"), "{err}");
}

#[test]
fn no_text_leaves_without_messages() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), TEMPLATE);
    let tok = tok.to_str().unwrap();
    let out = util::run_ok(
        "mc-import",
        &["--from", "chat", "--tokenizer", tok],
        &three_users(),
    );
    for word in [
        "hello", "helpful", "alice", "noon", "secret", "example", "chatcmpl",
    ] {
        assert!(!out.contains(word), "`{word}` leaked: {out}");
    }
    for r in rows(&out) {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "hash_ids",
                "input_length",
                "output_length",
                "session_id",
                "timestamp"
            ]
        );
    }
    // With --messages each row carries its request's messages as sent.
    let out = util::run_ok(
        "mc-import",
        &["--from", "chat", "--messages", "--tokenizer", tok],
        &three_users(),
    );
    let got = rows(&out);
    assert_eq!(
        got[4]["messages"],
        json!([
            msg("system", SYS),
            msg("user", "hello there"),
            msg("assistant", "hey bob"),
            msg("user", "what time")
        ])
    );
    assert!(!out.contains("secret-model-name"));
}

/// An OpenAI Batch API input line.
fn batch_in(id: &str, messages: Vec<Value>) -> Value {
    json!({"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
           "body": {"model": "secret-model-name", "messages": messages}})
}

/// A batch output line: the completion `created` at `t` (unix s).
fn batch_out(id: &str, t: u64, answer: &str, completion: u64) -> Value {
    json!({"id": format!("batch_req_{id}"), "custom_id": id,
           "response": {"status_code": 200, "request_id": "req_1", "body": {
               "id": "chatcmpl-1", "object": "chat.completion", "created": t, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": completion, "total_tokens": 2}}},
           "error": null})
}

#[test]
fn batch_input_and_output_files_pair_by_custom_id() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), TEMPLATE);
    let input = util::lines(&[
        batch_in("r1", vec![msg("user", "hello there")]),
        batch_in("r2", vec![msg("user", "good morning")]),
        batch_in("r3", vec![msg("user", "what time")]),
        batch_in("r4", vec![msg("user", "tell me more")]),
    ]);
    // Answers in another order; r3 failed, r4 has no answer line.
    let output = util::lines(&[
        batch_out("r2", 1_711_652_800, "hi", 7),
        json!({"id": "batch_req_r3", "custom_id": "r3", "response": {"status_code": 500, "body": {}}, "error": null}),
        batch_out("r1", 1_711_652_795, "hey", 9),
    ]);
    let i = util::write_file(dir.path(), "batch_input.jsonl", &input);
    let o = util::write_file(dir.path(), "batch_output.jsonl", &output);
    let out = util::tool("mc-import")
        .args(["--block-size", "4", "--tokenizer"])
        .arg(&tok)
        .arg(&o)
        .arg(&i)
        .output()
        .unwrap();
    util::assert_success(&out);
    let got = rows(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--from auto: reading chat"), "{err}");
    // r1 at 1711652795, r2 5 s later; <s> <user> 2 words <assistant> = 5.
    assert_eq!(got.len(), 2);
    assert_eq!(
        (
            &got[0]["timestamp"],
            &got[0]["input_length"],
            &got[0]["output_length"]
        ),
        (&json!(0), &json!(5), &json!(9))
    );
    assert_eq!(
        (
            &got[1]["timestamp"],
            &got[1]["input_length"],
            &got[1]["output_length"]
        ),
        (&json!(5000), &json!(5), &json!(7))
    );
    // [<s> <user> hello there] [<assistant>] and [<s> <user> good morning] [<assistant>].
    assert_eq!(util::ids(&got[0]), [0, 1]);
    assert_eq!(util::ids(&got[1]), [2, 3]);
    assert!(
        err.contains("4 rows in, 2 rows out, 1 dropped (failed), 1 dropped (request without its answer line)"),
        "{err}"
    );
}

#[test]
fn bad_lines_name_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(
        dir.path(),
        "{% if messages[0]['role'] == 'assistant' %}{{ raise_exception('Conversation must start with a user') }}{% endif %}{{ messages | length }}",
    );
    let tok = tok.to_str().unwrap();
    let good = litellm(1.0, vec![msg("user", "hi")], "a", Some(1));
    let no_role = litellm(2.0, vec![json!({"content": "hi"})], "a", Some(1));
    let refused = litellm(3.0, vec![msg("assistant", "hi")], "a", Some(1));
    let input = util::lines(&[good.clone(), no_role]);
    let ran = util::run("mc-import", &["--from", "chat", "--tokenizer", tok], &input);
    assert_eq!(ran.code, Some(65), "{}", ran.stderr);
    assert!(ran.stderr.contains("line 2"), "{}", ran.stderr);
    assert!(ran.stderr.contains("`messages[0].role`"), "{}", ran.stderr);
    let input = util::lines(&[good.clone(), good.clone(), refused]);
    let ran = util::run("mc-import", &["--from", "chat", "--tokenizer", tok], &input);
    assert_eq!(ran.code, Some(65), "{}", ran.stderr);
    assert!(ran.stderr.contains("line 3"), "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("chat template refuses them: Conversation must start with a user"),
        "{}",
        ran.stderr
    );
    // Skipped, the good lines still make rows.
    let input = util::with_line_at(&util::lines(&[good.clone(), good]), 2, "{not json");
    let (out, err) = util::run_ok_both(
        "mc-import",
        &["--from", "chat", "--on-error", "skip", "--tokenizer", tok],
        &input,
    );
    assert_eq!(rows(&out).len(), 2);
    assert!(err.contains("skipped 1 bad line (line 2)"), "{err}");
    // No tokenizer: said before anything is read.
    let ran = util::run("mc-import", &["--from", "chat"], &input);
    assert_eq!(ran.code, Some(2));
    assert!(
        ran.stderr.contains("--from chat needs --tokenizer"),
        "{}",
        ran.stderr
    );
}

/// The real DeepSeek V4 tokenizer (MCTRACE_DATA): its tokenizer_config.json
/// has no chat template, which is said with the fix; with a template given
/// by file, its bos token is one special token and turns share blocks.
#[test]
fn real_deepseek_tokenizer_with_a_template_file() {
    let Some(data) = util::data_dir("real_deepseek_tokenizer_with_a_template_file") else {
        return;
    };
    let folder = data.join("tokenizers/deepseek-v4");
    let folder = folder.to_str().unwrap();
    let log = util::lines(&[
        litellm(
            5.0,
            vec![msg("user", "Hello, who are you?")],
            "I am a model.",
            Some(6),
        ),
        litellm(
            9.0,
            vec![
                msg("user", "Hello, who are you?"),
                msg("assistant", "I am a model."),
                msg(
                    "user",
                    "Tell me a long story about a lighthouse keeper and the sea.",
                ),
            ],
            "Once",
            Some(1),
        ),
    ]);
    let ran = util::run(
        "mc-import",
        &["--from", "chat", "--tokenizer", folder],
        &log,
    );
    assert_eq!(ran.code, Some(65), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("--chat-template FILE"),
        "{}",
        ran.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let bos_only = util::write_file(dir.path(), "bos.jinja", "{{ bos_token }}");
    let out = util::run_ok(
        "mc-import",
        &[
            "--from",
            "chat",
            "--tokenizer",
            folder,
            "--chat-template",
            bos_only.to_str().unwrap(),
        ],
        &log,
    );
    for r in rows(&out) {
        assert_eq!(r["input_length"], 1, "bos is one special token: {r}");
    }
    // DeepSeek's chat format (a namespace collects the system prompt).
    let ds = util::write_file(
        dir.path(),
        "deepseek.jinja",
        "{% set ns = namespace(system='') %}{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] %}{% endif %}{% endfor %}{{ bos_token }}{{ ns.system }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}",
    );
    let out = util::run_ok(
        "mc-import",
        &[
            "--from",
            "chat",
            "--block-size",
            "4",
            "--tokenizer",
            folder,
            "--chat-template",
            ds.to_str().unwrap(),
        ],
        &log,
    );
    let got = rows(&out);
    assert_eq!(got[0]["session_id"], got[1]["session_id"]);
    let (a, b) = (util::ids(&got[0]), util::ids(&got[1]));
    let full = got[0]["input_length"].as_u64().unwrap() as usize / 4;
    assert!(full >= 1 && a[..full] == b[..full], "{a:?} {b:?}");
    assert!(got[1]["input_length"].as_u64() > got[0]["input_length"].as_u64());
}

/// A completion request (`body.prompt`) is tokenised as it is, without the
/// chat template; `--messages` keeps it as `text_input`.
#[test]
fn a_completion_prompt_is_tokenised_without_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), TEMPLATE);
    let log = util::lines(&[
        json!({"custom_id": "p1", "method": "POST", "url": "/v1/completions",
               "body": {"model": "m", "prompt": "hello there bob"}}),
        json!({"id": "b1", "custom_id": "p1", "response": {"status_code": 200, "body": {
            "created": 1_700_000_000u64, "choices": [{"text": "hi"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}}}),
    ]);
    let out = util::run_ok(
        "mc-import",
        &[
            "--from",
            "chat",
            "--messages",
            "--tokenizer",
            tok.to_str().unwrap(),
        ],
        &log,
    );
    let got = rows(&out);
    assert_eq!(got.len(), 1);
    // Three words, no <s> and no role tags.
    assert_eq!(got[0]["input_length"], 3);
    assert_eq!(got[0]["output_length"], 1);
    assert_eq!(got[0]["text_input"], "hello there bob");
    assert!(got[0].get("messages").is_none());
}
