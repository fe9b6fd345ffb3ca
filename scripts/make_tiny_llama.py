"""Build a tiny random Llama (weights, config, tokenizer) for the end-to-end tests. No hub access needed.

    .venv-vllm/bin/python scripts/make_tiny_llama.py .cache/tiny-llama

Runs in the vLLM venv (it needs torch, transformers and tokenizers). Deterministic: seed 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 512
WORDS = ["hello", "world", "the", "a", "is", "of", "and", "to", "in", "memory", "model", "token", "cache", "gpu"]


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()":
        vocab.setdefault(c, len(vocab))
    i = 0
    while len(vocab) < VOCAB:
        vocab.setdefault(f"tok{i}", len(vocab))
        i += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    fast.save_pretrained(out)


def build_model(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # the config records the dtype vLLM will serve it in
    data = json.loads((out / "config.json").read_text())
    data["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(data, indent=2))


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/tiny-llama")
    if (out / "config.json").exists() and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        print(f"{out}: already built")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    build_model(out)
    print(f"{out}: built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
