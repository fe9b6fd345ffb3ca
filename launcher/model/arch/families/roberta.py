"""RoBERTa and XLM-RoBERTa (BGE-M3, multilingual E5, the BGE rerankers): BERT's encoder (launcher/model/arch/families/
bert.py) under `roberta.`, with RoBERTa's heads.

The tensors are BERT's; the position table's first padding_idx + 1 rows are never used (positions start after the
padding index) but max_position_embeddings already counts them (514 for 512 tokens, 8194 for BGE-M3's 8192), so
the table is max_position_embeddings rows as in BERT. The heads differ: sequence classification has no pooler and a
two-layer classifier (classifier.dense, classifier.out_proj); the masked-LM head is `lm_head` (dense, layer_norm,
a decoder tied to the word embeddings, a bias). XLM-RoBERTa is the same model under its own class names.
"""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.bert import classifier, encoder, head_kind, num_labels, pooler
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm

MODEL_TYPES = ("roberta", "xlm-roberta")

# transformers' RobertaConfig / XLMRobertaConfig defaults for the fields read here (they differ in vocab_size).
_COMMON = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               max_position_embeddings=512, type_vocab_size=2, tie_word_embeddings=True, add_cross_attention=False,
               num_labels=2)  # fmt: skip
DEFAULTS: dict[str, dict[str, Any]] = {
    "roberta": dict(vocab_size=50265, **_COMMON),
    "xlm-roberta": dict(vocab_size=30522, **_COMMON),
}

# The architectures read (vLLM serves the XLM-RoBERTa ones with its RoBERTa classes); BgeM3EmbeddingModel is
# vLLM's name for BGE-M3 (set through --hf-overrides), whose checkpoint is an XLMRobertaModel's.
HEADS: dict[str, str] = {
    "RobertaModel": "model",
    "XLMRobertaModel": "model",
    "BgeM3EmbeddingModel": "model",
    "RobertaForSequenceClassification": "sequence_classification",
    "XLMRobertaForSequenceClassification": "sequence_classification",
    "RobertaForTokenClassification": "token_classification",
    "XLMRobertaForTokenClassification": "token_classification",
    "RobertaForMaskedLM": "masked_lm",
    "XLMRobertaForMaskedLM": "masked_lm",
}


def roberta_head(c: Cfg, base: str, hidden: int, vocab: int, kind: str) -> tuple[tuple[Tensor, ...], bool]:
    """RoBERTa's tensors after the encoder, and whether the masked-LM decoder is tied to the word embeddings."""
    if kind == "model":
        return pooler(base, hidden), False
    if kind == "sequence_classification":
        # a dense (tanh) over the first token, then out_proj to the labels; no pooler
        return (*linear("classifier.dense", "other", hidden, hidden, None, bias=True, detail="classifier"),
                *classifier("classifier.out_proj", hidden, num_labels(c))), False  # fmt: skip
    if kind == "token_classification":
        return classifier("classifier", hidden, num_labels(c)), False
    # masked LM: dense, layer_norm, then the decoder with `lm_head.bias` as its bias; tied, the decoder's weight is
    # the word embedding and its bias that same parameter; untied, both its own.
    tie = c.bool("tie_word_embeddings")
    ts = [*linear("lm_head.dense", "lm_head", hidden, hidden, None, bias=True, detail="mlm_head"),
          *norm("lm_head.layer_norm", hidden, None, part="lm_head", bias=True, detail="mlm_head"),
          Tensor("lm_head.bias", "lm_head", "bias", (vocab,), detail="mlm_head")]  # fmt: skip
    if not tie:
        ts += [Tensor("lm_head.decoder.weight", "lm_head", "lm_head", (vocab, hidden), gguf="output"),
               Tensor("lm_head.decoder.bias", "lm_head", "bias", (vocab,), detail="mlm_head")]  # fmt: skip
    return tuple(ts), tie


def read(c: Cfg, meta: Meta) -> Model:
    kind = head_kind(c, meta, HEADS)
    base = "" if kind == "model" else "roberta."
    head, tie = roberta_head(c, base, c.int("hidden_size"), c.int("vocab_size"), kind)
    return encoder(c, meta, base=base, head=head, is_tied=tie)
