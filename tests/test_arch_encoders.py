"""BERT-style encoders vLLM serves with `--runner pooling` (embeddings, rerankers): read exactly (the oracle rows in
tests/fixtures/configs-v2/extra/{bert,roberta}.tsv hold transformers' counts), marked non-causal, their heads
chosen by the config's architecture, and listed by `vlaunch archs`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.common.errors import ConfigError
from launcher.model.arch import read_config
from launcher.model.arch.layers import Attention
from tests.arch_oracle import load_config

# transformers 5.19's own count (the oracle rows) of the published configs
PUBLISHED = {
    "xlm-roberta--bge-m3": 567_754_752,
    "xlm-roberta--bge-reranker-v2-m3": 567_755_777,
    "xlm-roberta--multilingual-e5-large": 559_890_432,
    "bert--bge-large-en-v1.5": 335_141_888,
    "bert--all-minilm-l6-v2": 22_713_216,
    "bert--ms-marco-minilm-l6-v2": 22_713_601,
}


def _count(tmp_path: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(main, ["count", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_prints_the_exact_total(tmp_path: Path, name: str) -> None:
    data = _count(tmp_path, load_config(name))
    assert data["total"] == PUBLISHED[name]
    assert data["arch_support"] == "exact" and data["causal"] is False
    (layers,) = data["layers"].values()
    assert layers["bidirectional"] is True
    text = CliRunner().invoke(main, ["count", str(tmp_path)]).stdout
    assert f"{PUBLISHED[name]:,}" in text and "no KV cache" in text


def test_encoder_layers_are_bidirectional_attention_with_bert_names() -> None:
    m = read_config(load_config("xlm-roberta--bge-m3"))
    assert not m.causal and m.max_position_embeddings == 8194 and m.rotary_dim == 0
    attn = m.layers[0].mixers[0]
    assert isinstance(attn, Attention) and not attn.causal and attn.kind == "full_attention"
    names = {t.name for t in m.tensors()}
    assert "encoder.layer.23.attention.self.query.bias" in names
    assert "encoder.layer.0.intermediate.dense.weight" in names and "pooler.dense.weight" in names
    assert "embeddings.token_type_embeddings.weight" in names


def test_decoders_stay_causal() -> None:
    m = read_config({"model_type": "llama"})
    assert m.causal and all(getattr(mx, "causal", True) for layer in m.layers for mx in layer.mixers)


def test_the_architecture_picks_the_head() -> None:
    base = {"model_type": "bert", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 32}  # fmt: skip

    def names(arch: str, **kw: Any) -> set[str]:
        return {t.name for t in read_config({**base, "architectures": [arch], **kw}).tensors()}

    assert "pooler.dense.weight" in names("BertModel")
    seq = names("BertForSequenceClassification", id2label={"0": "a", "1": "b", "2": "c"})
    assert {"bert.pooler.dense.weight", "classifier.weight"} <= seq
    cls = read_config({**base, "architectures": ["BertForSequenceClassification"], "num_labels": 5}).tensors()
    assert next(t.shape for t in cls if t.name == "classifier.weight") == (5, 64)
    tok = names("BertForTokenClassification")
    assert "classifier.weight" in tok and not any("pooler" in n for n in tok)
    # no architectures: the base model
    assert "pooler.dense.weight" in {t.name for t in read_config(base).tensors()}


def test_xlm_roberta_masked_lm_equals_transformers() -> None:
    """XLMRobertaForMaskedLM registers lm_head before the encoder, so transformers files the tied word embedding
    under lm_head (no oracle row: the columns differ); the total is transformers' 460,648."""
    cfg = {"architectures": ["XLMRobertaForMaskedLM"], "model_type": "xlm-roberta", "vocab_size": 1000,
           "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 320,
           "max_position_embeddings": 130, "type_vocab_size": 1}  # fmt: skip
    m = read_config(cfg)
    assert m.tied_embeddings and sum(t.numel for t in m.tensors() if t.is_parameter) == 460_648


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"model_type": "bert", "architectures": ["BertForQuestionAnswering"]}, "architectures"),
        ({"model_type": "roberta", "architectures": ["RobertaForCausalLM"]}, "architectures"),
        ({"model_type": "bert", "add_cross_attention": True, "is_decoder": True}, "add_cross_attention"),
        ({"model_type": "bert", "hidden_size": 100, "num_attention_heads": 12}, "num_attention_heads"),
        ({"model_type": "bert", "architectures": ["BertForSequenceClassification"], "id2label": {}}, "id2label"),
    ],
)
def test_what_vllm_does_not_serve_is_an_error_naming_the_field(cfg: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        read_config(cfg, "config.json")
    assert e.value.field == field


def test_archs_lists_the_pooling_architectures() -> None:
    r = CliRunner().invoke(main, ["archs", "--json"])
    assert r.exit_code == 0
    rows = {row["model_type"]: row for row in json.loads(r.stdout)["archs"]}
    assert {"BertModel", "BertForSequenceClassification"} <= set(rows["bert"]["architectures"])
    assert "RobertaForSequenceClassification" in rows["roberta"]["architectures"]
    assert {"XLMRobertaModel", "XLMRobertaForSequenceClassification"} <= set(rows["xlm-roberta"]["architectures"])
    for mt in ("bert", "roberta", "xlm-roberta"):
        assert rows[mt]["arch_support"] == "exact" and rows[mt]["layer_kinds"] == {"full_attention": 12}
