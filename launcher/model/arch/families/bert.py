"""BERT, the encoder vLLM serves with `--runner pooling` (embedding models such as BGE, E5 and all-MiniLM as
BertModel; cross-encoders as BertForSequenceClassification).

Word, learned absolute position and token-type embeddings, summed and LayerNorm'd; then post-norm layers of
bidirectional attention (biased query/key/value under `attention.self`, a biased `attention.output.dense` and a
LayerNorm after the residual) and a plain MLP (biased `intermediate.dense` and `output.dense`, a LayerNorm after
the residual). There is no final norm. The attention sees the whole sequence both ways (`causal=False`): vLLM
runs it as EncoderOnlyAttention, which keeps no KV cache.

What follows the encoder depends on the architecture, as transformers builds it: BertModel (the base model, its
tensors unprefixed) ends in a pooler (a biased dense over the first token); the heads put the base model under
`bert.` and add a classifier over the pooler (sequence classification), a classifier over every token (token
classification, no pooler) or the masked-LM head (no pooler). vLLM's BertModel embedding class does not load the
pooler; it is counted here as transformers builds it and the checkpoint holds it (detail "pooler").

Also home of the encoder frame RoBERTa and XLM-RoBERTa share (launcher/model/arch/families/roberta.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.model.arch.common import Meta, build
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt2 import learned_positions
from launcher.model.arch.layers import Attention, DenseMLP, Layer, Norm
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm, param

MODEL_TYPES = ("bert",)

# transformers' BertConfig defaults for the fields read here (num_labels: PreTrainedConfig's, without id2label).
DEFAULTS: dict[str, dict[str, Any]] = {
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2, tie_word_embeddings=True,
                 add_cross_attention=False, num_labels=2),
}  # fmt: skip

# The architectures read, and what each puts after the encoder. vLLM's own names for BERT checkpoints read
# the same way: BertSpladeSparseEmbeddingModel (set through --hf-overrides) loads a BertForMaskedLM checkpoint.
HEADS: dict[str, str] = {
    "BertModel": "model",
    "BertForSequenceClassification": "sequence_classification",
    "BertForTokenClassification": "token_classification",
    "BertForMaskedLM": "masked_lm",
    "BertSpladeSparseEmbeddingModel": "masked_lm",
}


def head_kind(c: Cfg, meta: Meta, heads: Mapping[str, str]) -> str:
    """What follows the encoder, from the config's architecture (the base model when it names none)."""
    if meta.architecture == meta.model_type:
        return "model"
    kind = heads.get(meta.architecture)
    if kind is None:
        known = ", ".join(sorted(heads))
        raise c.error(f"{meta.architecture} is not an encoder architecture vLLM serves; read: {known}",
                      "architectures")  # fmt: skip
    return kind


def num_labels(c: Cfg) -> int:
    """Classifier outputs: the size of id2label when the config has one, else num_labels (transformers' rule)."""
    labels = c.raw.get("id2label")
    if labels is not None:
        if not isinstance(labels, Mapping) or not labels:
            raise c.error("must be a non-empty object", "id2label")
        return len(labels)
    return c.int("num_labels")


def pooler(base: str, hidden: int) -> tuple[Tensor, ...]:
    """The pooler: a biased hidden × hidden dense over the first token (tanh)."""
    return tuple(linear(f"{base}pooler.dense", "other", hidden, hidden, None, bias=True, detail="pooler"))


def classifier(name: str, hidden: int, labels: int) -> tuple[Tensor, ...]:
    """A biased linear classifier (labels × hidden)."""
    return tuple(linear(name, "other", labels, hidden, None, bias=True, detail="classifier"))


def bert_head(c: Cfg, base: str, hidden: int, vocab: int, kind: str) -> tuple[tuple[Tensor, ...], bool]:
    """BERT's tensors after the encoder, and whether the masked-LM decoder is tied to the word embeddings."""
    if kind == "model":
        return pooler(base, hidden), False
    if kind == "sequence_classification":
        return (*pooler(base, hidden), *classifier("classifier", hidden, num_labels(c))), False
    if kind == "token_classification":
        return classifier("classifier", hidden, num_labels(c)), False
    # masked LM: a transform (dense, LayerNorm), then a decoder to the vocabulary whose bias is `predictions.bias`;
    # tied, the decoder's weight is the word embedding and its bias that same parameter; untied, both its own.
    p = "cls.predictions"
    tie = c.bool("tie_word_embeddings")
    ts = [*linear(f"{p}.transform.dense", "other", hidden, hidden, None, bias=True, detail="mlm_head"),
          *norm(f"{p}.transform.LayerNorm", hidden, None, part="other", bias=True, detail="mlm_head"),
          Tensor(f"{p}.bias", "other", "bias", (vocab,), detail="mlm_head")]  # fmt: skip
    if not tie:
        ts += [Tensor(f"{p}.decoder.weight", "lm_head", "lm_head", (vocab, hidden), gguf="output"),
               Tensor(f"{p}.decoder.bias", "other", "bias", (vocab,), detail="mlm_head")]  # fmt: skip
    return tuple(ts), tie


def encoder(c: Cfg, meta: Meta, *, base: str, head: tuple[Tensor, ...], is_tied: bool) -> Model:
    """The BERT-style encoder under `base` ("" for the base model, "bert." / "roberta." under a head): embeddings
    (word, positions, token types, LayerNorm) and num_hidden_layers post-norm layers; `head` after them."""
    if c.has("add_cross_attention") and c.bool("add_cross_attention"):  # read only when set: never in an encoder
        raise c.error("cross-attention (a BERT decoder) is not an encoder vLLM serves", "add_cross_attention")
    vocab, hidden = c.int("vocab_size"), c.int("hidden_size")
    n = c.int("num_attention_heads")
    if hidden % n:
        raise c.error(f"hidden_size {hidden} is not a multiple of num_attention_heads {n}", "num_attention_heads")
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=hidden // n, qkv_bias=True, o_bias=True,
                     names=("self.query", "self.key", "self.value", "output.dense"), name="attention",
                     causal=False)  # fmt: skip
    mlp = DenseMLP(hidden=hidden, inter=c.int("intermediate_size"), gated=False, bias=True,
                   names=("", "intermediate.dense", "output.dense"), name="")  # fmt: skip
    norms = (Norm(name="attention.output.LayerNorm", size=hidden, bias=True, gguf="attn_output_norm"),
             Norm(name="output.LayerNorm", size=hidden, bias=True, gguf="layer_output_norm"))  # fmt: skip
    layers = [Layer(prefix=f"{base}encoder.layer.{i}", mixers=(attn,), mlps=(mlp,), norms=norms)
              for i in range(c.int("num_hidden_layers"))]  # fmt: skip
    e = f"{base}embeddings"
    embeddings = [
        Tensor(f"{e}.word_embeddings.weight", "embedding", "embedding", (vocab, hidden), gguf="token_embd"),
        # RoBERTa's positions start after its padding index; max_position_embeddings already counts those rows
        learned_positions(f"{e}.position_embeddings", c.int("max_position_embeddings"), hidden),
    ]
    types = c.int0("type_vocab_size")
    if types:
        embeddings += param(f"{e}.token_type_embeddings.weight", "embedding", (types, hidden), None, role="position",
                            gguf="token_types")  # fmt: skip
    embeddings += norm(f"{e}.LayerNorm", hidden, None, part="embedding", bias=True, gguf="token_embd_norm")
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=tuple(embeddings),
                 head=head, rotary_dim=0, causal=False)  # fmt: skip


def read(c: Cfg, meta: Meta) -> Model:
    kind = head_kind(c, meta, HEADS)
    base = "" if kind == "model" else "bert."
    head, tie = bert_head(c, base, c.int("hidden_size"), c.int("vocab_size"), kind)
    return encoder(c, meta, base=base, head=head, is_tied=tie)
