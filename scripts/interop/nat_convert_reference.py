#!/usr/bin/env python3
"""A re-implementation of ai-dynamo/dynamo's benchmarks/nat_trace/convert.py
(the upstream NAT-profiler-to-Mooncake converter), written from its
documented behaviour for scripts/bench-nat.sh: the upstream script imports
aiperf (Tokenizer, rolling_hasher.texts_to_hashes) and tqdm, which this
machine cannot install, and its source cannot be downloaded here.

What it does, step by step as the upstream does:
  1. json.load the whole file (a list of {"request_number", "intermediate_steps"}).
  2. Per request: index LLM_START payloads by UUID, pair each LLM_END with
     its start; prompt_tokens/completion_tokens from the end's
     usage_info.token_usage; sort the calls by event_timestamp.
  3. Skip calls with prompt_tokens == 0 or empty text; the text is the
     messages' `content` joined with newlines (chat_inputs of the start's metadata).
  4. Tokenize every text (HF `tokenizers`, as aiperf's Tokenizer wraps),
     cut into blocks of --block-size tokens, each block's id the dense
     number of hash((parent hash, tuple(block tokens))) in first-seen
     order (aiperf's RollingHasher), one hasher for all texts.
  5. Write {"session_id": "conv_<n>", "input_length", "output_length",
     "hash_ids"[, "delay"]} per call with json.dumps.

  nat_convert_reference.py --input-file F --tokenizer tokenizer.json [--block-size 64] [--output-file O]
"""

import argparse
import json
import os

from tokenizers import Tokenizer


def extract_llm_calls(request):
    steps = request.get("intermediate_steps", [])
    starts = {}
    for step in steps:
        p = step.get("payload", {})
        if p.get("event_type") == "LLM_START" and p.get("UUID"):
            starts[p["UUID"]] = p
    calls = []
    for step in steps:
        p = step.get("payload", {})
        if p.get("event_type") != "LLM_END":
            continue
        uuid = p.get("UUID")
        if not uuid or uuid not in starts:
            continue
        start = starts[uuid]
        usage = p.get("usage_info", {}).get("token_usage", {})
        calls.append(
            {
                "chat_inputs": start.get("metadata", {}).get("chat_inputs", []),
                "prompt_tokens": usage.get("prompt_tokens", 0),
                "completion_tokens": usage.get("completion_tokens", 0),
                "event_timestamp": p.get("event_timestamp"),
            }
        )
    calls.sort(key=lambda c: c.get("event_timestamp", 0) or 0)
    return calls


def text_of(chat_inputs):
    texts = []
    for m in chat_inputs or []:
        if isinstance(m, dict):
            c = m.get("content", "")
            if c:
                texts.append(str(c))
        elif isinstance(m, str):
            texts.append(m)
    return "\n".join(texts)


class RollingHasher:
    def __init__(self):
        self.ids = {}

    def blocks(self, blocks):
        parent, out = 0, []
        for b in blocks:
            h = hash((parent, tuple(b)))
            out.append(self.ids.setdefault(h, len(self.ids)))
            parent = h
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input-file", required=True)
    ap.add_argument("--output-file")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--delay", type=int, default=500)
    a = ap.parse_args()
    with open(a.input_file) as f:
        requests = json.load(f)
    entries = []
    for req in requests:
        session = f"conv_{req.get('request_number', 0)}"
        for call in extract_llm_calls(req):
            if call["prompt_tokens"] == 0:
                continue
            text = text_of(call["chat_inputs"])
            if text:
                entries.append((session, call["prompt_tokens"], call["completion_tokens"], text))
    tok = Tokenizer.from_file(a.tokenizer)
    hasher = RollingHasher()
    out_path = a.output_file or os.path.splitext(a.input_file)[0] + "_mooncake.jsonl"
    seen = set()
    with open(out_path, "w") as f:
        for session, isl, osl, text in entries:
            ids = tok.encode(text, add_special_tokens=False).ids
            blocks = [ids[i : i + a.block_size] for i in range(0, len(ids), a.block_size)]
            row = {"session_id": session, "input_length": isl, "output_length": osl,
                   "hash_ids": hasher.blocks(blocks)}
            if session in seen:
                row["delay"] = a.delay
            else:
                seen.add(session)
            f.write(json.dumps(row) + "\n")
    print(f"Saved {len(entries)} entries to {out_path}")


if __name__ == "__main__":
    main()
