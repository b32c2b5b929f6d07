//! Writes a deterministic NAT-profiler-shaped file (a JSON array of
//! requests, as `json.dump(indent=2)` writes it) for benchmarks: ReAct-style
//! agent requests whose prompts grow call by call, with the LLM_NEW_TOKEN
//! stream events that make real files large.
//!
//! cargo run --release --example gen_nat -- --bytes 512M > big_profiler_traces.json

mod common;

use common::{parse_size, Rng};
use std::io::{self, BufWriter, Write};

use serde_json::{json, Value};

/// `n` words from a small vocabulary.
fn words(rng: &mut Rng, n: usize) -> String {
    const WORDS: [&str; 16] = [
        "the",
        "agent",
        "calls",
        "a",
        "tool",
        "with",
        "input",
        "and",
        "reads",
        "its",
        "observation",
        "before",
        "answering",
        "date",
        "time",
        "question",
    ];
    (0..n)
        .map(|_| WORDS[rng.below(16) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn msg(kind: &str, content: &str) -> Value {
    json!({"content": content, "additional_kwargs": {}, "response_metadata": {}, "type": kind, "name": null, "id": null})
}

fn event(
    kind: &str,
    uuid: &str,
    t: f64,
    metadata: Value,
    usage: (u64, u64),
    chunk: Option<&str>,
) -> Value {
    json!({
        "parent_id": "root", "function_ancestry": {"function_id": "f", "function_name": "<workflow>", "parent_id": "root", "parent_name": "root"},
        "payload": {
            "event_type": kind, "event_timestamp": t, "span_event_timestamp": null, "framework": "langchain",
            "name": "meta/llama-3.3-70b-instruct", "tags": null, "metadata": metadata,
            "data": {"input": null, "output": null, "chunk": chunk, "payload": null},
            "usage_info": {"token_usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "cached_tokens": 0, "reasoning_tokens": 0, "total_tokens": usage.0 + usage.1}, "num_llm_calls": 0, "seconds_between_calls": 0},
            "UUID": uuid
        }
    })
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bytes = args
        .iter()
        .position(|a| a == "--bytes")
        .and_then(|i| args.get(i + 1))
        .map_or(64 << 20, |s| parse_size(s));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let system = words(&mut rng, 2000);
    let out = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, out.lock());
    let mut written = 0u64;
    let mut t = 1_795_339_429.0f64;
    out.write_all(b"[")?;
    let mut request = 0u64;
    while written < bytes {
        let mut steps = Vec::new();
        let mut history = vec![
            msg("system", &system),
            msg("human", &format!("Question: {}", words(&mut rng, 20))),
        ];
        for call in 0..1 + rng.below(5) {
            let uuid = format!("{request:08}-{call:04}");
            t += 0.05 + rng.below(100) as f64 / 1000.0;
            steps.push(event(
                "LLM_START",
                &uuid,
                t,
                json!({"chat_inputs": history, "chat_responses": null}),
                (0, 0),
                None,
            ));
            let answer_words = 20 + rng.below(200) as usize;
            let mut answer = Vec::with_capacity(answer_words);
            for _ in 0..answer_words {
                let w = words(&mut rng, 1);
                t += 0.01;
                let meta = json!({"chat_responses": [{"text": w, "generation_info": null, "type": "ChatGenerationChunk",
                    "message": {"content": w, "additional_kwargs": {}, "response_metadata": {"model_provider": "openai"}, "type": "AIMessageChunk", "name": null, "id": uuid}}],
                    "chat_inputs": null, "tool_inputs": null, "tool_outputs": null, "tool_info": null, "span_inputs": null, "span_outputs": null, "provided_metadata": null, "tools_schema": []});
                steps.push(event("LLM_NEW_TOKEN", &uuid, t, meta, (0, 0), Some(&w)));
                answer.push(w);
            }
            let answer = answer.join(" ");
            steps.push(event(
                "LLM_END",
                &uuid,
                t,
                json!({"chat_responses": null, "chat_inputs": null}),
                (4 * history.len() as u64 + 700, answer_words as u64),
                None,
            ));
            history.push(msg("ai", &answer));
            history.push(msg(
                "human",
                &format!("Observation: {}", words(&mut rng, 300)),
            ));
            t += rng.below(500) as f64 / 1000.0;
        }
        let req = json!({"request_number": request, "intermediate_steps": steps});
        if request > 0 {
            out.write_all(b",\n")?;
        }
        let text = serde_json::to_vec_pretty(&req)?;
        written += text.len() as u64 + 2;
        out.write_all(&text)?;
        request += 1;
    }
    out.write_all(b"]\n")?;
    out.flush()
}
