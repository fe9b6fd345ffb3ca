"""The tiny random Llama `vlaunch demo` serves and the end-to-end tests boot (4 layers, 2 KV heads, head_dim 32,
bfloat16, vocabulary 512, seed 0): weights, config and tokenizer, built with no hub access.

A script run by the python that has vLLM (it needs torch, transformers and tokenizers, which vlaunch's own
environment lacks), by its path: `PYTHON tiny_llama.py OUT` (`launcher.run.demo.build_model`;
`scripts/make_tiny_llama.py` in a checkout). It imports nothing from vlaunch. The model is built in a directory
beside OUT and renamed into place, so OUT never holds half a model. Exit 0: built, or already there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

VOCAB = 512
WORDS = ["hello", "world", "the", "a", "is", "of", "and", "to", "in", "memory", "model", "token", "cache", "gpu"]
FILES = ("config.json", "model.safetensors", "tokenizer.json")
"""The files a built tiny model holds (and a directory holding them all is taken as built)."""


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # type: ignore[import-not-found,unused-ignore]
    from transformers import PreTrainedTokenizerFast  # type: ignore[import-not-found,unused-ignore]

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
    import torch  # type: ignore[import-not-found,unused-ignore]
    from transformers import LlamaConfig, LlamaForCausalLM  # type: ignore[import-not-found,unused-ignore]

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


def built(out: Path) -> bool:
    return all((out / name).is_file() for name in FILES)


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".cache/tiny-llama")
    if built(out):
        print(f"{out}: already built")
        return 0
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"{out}: exists and holds no tiny model; give an empty or new directory", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.parent / f".{out.name}.building-{os.getpid()}"
    try:
        work.mkdir()
        build_tokenizer(work)
        build_model(work)
        os.replace(work, out)  # over an empty directory, or onto nothing
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{out}: built")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
