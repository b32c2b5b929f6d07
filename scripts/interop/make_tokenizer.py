"""Trains the tiny model's tokenizer: byte-level BPE, 8,000 tokens, with a
chat template. Written by scripts/interop.sh into the model folder given as
the first argument; the training text is the files given after it (the
repository's own Markdown and Rust sources), so no download is needed.

Usage: python make_tokenizer.py OUT_DIR FILE...
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ["<s>", "</s>", "<pad>", "<|start|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|start|>{{ m['role'] }}\n{{ m['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)


def main():
    out, files = sys.argv[1], sys.argv[2:]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "model_max_length": 8192,
                "add_bos_token": False,
                "chat_template": CHAT_TEMPLATE,
            },
            f,
            indent=2,
        )
    print(f"tokenizer: {tok.get_vocab_size()} tokens in {out}")


if __name__ == "__main__":
    main()
