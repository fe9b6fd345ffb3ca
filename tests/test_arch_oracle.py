"""Every model in the transformers oracle (tests/fixtures/configs-v2): parameters equal by part, class defaults
equal, and the layer map (mixer kind of every layer) equal to what transformers builds."""

from __future__ import annotations

import re

import pytest

from launcher.model.arch import read_config
from tests.arch_oracle import (
    COLUMNS,
    decode_pattern,
    layer_rows,
    load_config,
    oracle_buckets,
    oracle_rows,
    vllm_rows,
)

ROWS = oracle_rows()
LAYERS = layer_rows()
VLLM_ROWS = vllm_rows()


@pytest.mark.parametrize("row", ROWS, ids=[r["model"] for r in ROWS])
def test_parameters_equal_transformers(row: dict[str, str]) -> None:
    name = row["model"]
    full = name.endswith("#full-multimodal")
    m = read_config(load_config(name), name)
    assert m.support == "exact"
    got = oracle_buckets(m.tensors(), full_multimodal=full)
    want = {k: int(row[k]) for k in COLUMNS}
    if name in UNTIED_IN_VLLM:
        # transformers' full model ties lm_head from the wrapper's top-level flag; vLLM (and the text-only row)
        # follow text_config, which unties it: the only difference is one vocab × hidden head.
        assert want["lm_head"] == 0 and got["lm_head"] == m.vocab_size * m.hidden_size
        want["lm_head"] = got["lm_head"]
    else:
        assert sum(got.values()) == int(row["total_params"])
    assert got == want


@pytest.mark.parametrize("row", VLLM_ROWS, ids=[r["model"] for r in VLLM_ROWS])
def test_parameters_equal_vllm(row: dict[str, str]) -> None:
    """Families transformers has no class for (MiMo, Nemotron-NAS, Kimi K3): vLLM's own model, built on the meta
    device, holds as many elements as the tensors read here, for the language model, the towers and the MTP layers.
    vLLM keeps routers' score corrections as parameters; here they are buffers the checkpoint holds, so the text
    total counts what the checkpoint holds."""
    m = read_config(load_config(row["model"]), row["model"])
    assert m.support == "exact"
    text = sum(t.numel for t in m.tensors(towers=False) if t.in_checkpoint)
    vision = sum(t.numel for tower in m.towers for t in tower.tensors())
    assert (text, vision) == (int(row["text"]), int(row["vision"]))
    assert text + vision == int(row["total"])
    if row["mtp"]:
        mtp = sum(t.numel for j, layer in enumerate(m.mtp_layers) for t in layer.tensors(m.num_layers + j))
        assert mtp == int(row["mtp"])


# Mistral3Config() sets tie_word_embeddings true at the top and false in text_config (configs-v2 README).
UNTIED_IN_VLLM = {"mistral3--default#full-multimodal"}


DEFAULT_ROWS = [r for r in ROWS if r["model"].endswith("--default")]


@pytest.mark.parametrize("row", DEFAULT_ROWS, ids=[r["model"] for r in DEFAULT_ROWS])
def test_class_defaults(row: dict[str, str]) -> None:
    """A config that names only its model_type is counted with transformers' class defaults."""
    cfg = load_config(row["model"])
    bare = {"model_type": cfg["model_type"], "architectures": cfg.get("architectures", [])}
    m = read_config(bare, "defaults")
    assert sum(oracle_buckets(m.tensors(), full_multimodal=False).values()) == int(row["total_params"])


@pytest.mark.parametrize("row", LAYERS, ids=[r["model_type"] for r in LAYERS])
def test_layer_map(row: dict[str, str]) -> None:
    m = read_config(load_config(row["file"].removesuffix(".json")), row["file"])
    assert [layer.code for layer in m.layers] == decode_pattern(row["layer_pattern"])
    window = row["sliding_window"]
    if window:
        assert {getattr(mx, "window", None) for layer in m.layers for mx in layer.mixers} - {None} == {
            int(w) for w in window.split(",")
        }
    if row["attention_chunk_size"]:
        assert {getattr(mx, "chunk", None) for layer in m.layers for mx in layer.mixers} - {None} == {
            int(row["attention_chunk_size"])
        }


KIND_NAMES = {"full": "full_attention", "sliding": "sliding_attention", "chunked": "chunked_attention"}


def _kv_expected(text: str) -> dict[tuple[str, int], int]:
    """LAYERS.tsv's kv_per_token column: (kind, elements per token per layer) -> layers."""
    out: dict[tuple[str, int], int] = {}
    for part in filter(None, (p.strip() for p in text.split("|"))):
        head = re.match(r"(\d+)x (full|sliding|chunked|mla)", part)
        assert head, part
        n, kind = int(head.group(1)), head.group(2)
        if kind == "mla":
            latent = re.search(r"(\d+)\+(\d+)=(\d+)", part)
            assert latent
            elems = int(latent.group(3))
        else:
            total = re.search(r"= (\d+) elems", part)
            assert total
            elems = int(total.group(1))
        key = (KIND_NAMES.get(kind, kind), elems)
        out[key] = out.get(key, 0) + n
    return out


@pytest.mark.parametrize("row", LAYERS, ids=[r["model_type"] for r in LAYERS])
def test_kv_geometry(row: dict[str, str]) -> None:
    """Elements each attention layer caches per token equal what transformers' k/v projections produce."""
    if not row["kv_per_token"] or row["model_type"] == "hrm_text":
        pytest.skip("no attention cache in this model, or KV slots that are not layers")
    m = read_config(load_config(row["file"].removesuffix(".json")), row["file"])
    got: dict[tuple[str, int], int] = {}
    for layer in m.layers:
        for mx in layer.mixers:
            if mx.kind in ("full_attention", "sliding_attention", "chunked_attention", "mla"):
                key = (mx.kind, mx.kv_elements_per_token())
                got[key] = got.get(key, 0) + 1
    assert got == _kv_expected(row["kv_per_token"])
