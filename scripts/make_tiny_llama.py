"""Build a tiny random Llama (weights, config, tokenizer) for the end-to-end tests. No hub access needed.

    .venv-vllm/bin/python scripts/make_tiny_llama.py .cache/tiny-llama

Runs in the vLLM venv (it needs torch, transformers and tokenizers). Deterministic: seed 0. The recipe is the
package's `launcher/run/tiny_llama.py`, the one `vlaunch demo` runs; this script loads it by path (the vLLM venv
does not have vlaunch installed).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_RECIPE = Path(__file__).resolve().parents[1] / "launcher" / "run" / "tiny_llama.py"
_spec = importlib.util.spec_from_file_location("tiny_llama", _RECIPE)
assert _spec is not None and _spec.loader is not None
_recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipe)

VOCAB: int = _recipe.VOCAB
WORDS: list[str] = _recipe.WORDS
build_tokenizer = _recipe.build_tokenizer
build_model = _recipe.build_model
main = _recipe.main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
