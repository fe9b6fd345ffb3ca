"""OPT: learned position embeddings with two extra slots (OPT offsets positions by 2), biased q/k/v/out
projections and a plain MLP (fc1, fc2) kept directly in the decoder layer, LayerNorms that may have no
parameters (`layer_norm_elementwise_affine`) or come after the blocks (`do_layer_norm_before` false, then no
final norm), and optional projections between a narrower word embedding and the hidden size (OPT-350m)."""

from __future__ import annotations

from typing import Any

from launcher.model.arch.common import Meta, build, tied
from launcher.model.arch.config import Cfg
from launcher.model.arch.families.gpt2 import learned_positions
from launcher.model.arch.layers import Attention, DenseMLP, Layer, Norm, norms
from launcher.model.arch.model import Model
from launcher.model.arch.tensors import Tensor, linear, norm

MODEL_TYPES = ("opt",)

DEFAULTS: dict[str, dict[str, Any]] = {
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072, max_position_embeddings=2048,
                do_layer_norm_before=True, _remove_final_layer_norm=False, word_embed_proj_dim=None,
                num_attention_heads=12, enable_bias=True, layer_norm_elementwise_affine=True,
                tie_word_embeddings=True),
}  # fmt: skip

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: positions are shifted by 2, the table has 2 more rows


def read(c: Cfg, meta: Meta) -> Model:
    vocab, hidden, inter = c.int("vocab_size"), c.int("hidden_size"), c.int("ffn_dim")
    n = c.int("num_attention_heads")
    d = hidden // n
    if d <= 0:
        raise c.error("hidden_size // num_attention_heads is 0", "num_attention_heads")
    word = c.opt_int("word_embed_proj_dim") or hidden  # width of the token embedding (and of lm_head's input)
    bias = c.bool("enable_bias")
    affine = c.bool("layer_norm_elementwise_affine")  # False: LayerNorms without weight or bias
    ln: tuple[Norm, ...] = ()
    if affine:
        ln = norms(hidden, "self_attn_layer_norm", "final_layer_norm", bias=True)
    is_tied = tied(c, meta)
    attn = Attention(hidden=hidden, heads=n, kv_heads=n, head_dim=d, qkv_bias=bias, o_bias=bias,
                     names=("q_proj", "k_proj", "v_proj", "out_proj"))  # fmt: skip
    # fc1 and fc2 sit in the layer itself (no mlp module)
    mlp = DenseMLP(hidden=hidden, inter=inter, gated=False, bias=bias, names=("", "fc1", "fc2"), name="")
    layers = [
        Layer(prefix=f"model.decoder.layers.{i}", norms=ln, mixers=(attn,), mlps=(mlp,))
        for i in range(c.int("num_hidden_layers"))
    ]
    p = "model.decoder"
    embeddings = (
        Tensor(f"{p}.embed_tokens.weight", "embedding", "embedding", (vocab, word), gguf="token_embd"),
        learned_positions(f"{p}.embed_positions", c.int("max_position_embeddings") + POSITION_OFFSET, hidden),
    )
    extra: list[Tensor] = []
    if word != hidden:
        # a narrower word embedding is projected up into the layers and the last hidden state back down
        extra += linear(f"{p}.project_out", "other", word, hidden, None)
        extra += linear(f"{p}.project_in", "other", hidden, word, None)
    head: list[Tensor] = []
    if c.bool("do_layer_norm_before") and not c.bool("_remove_final_layer_norm") and affine:
        head += norm(f"{p}.final_layer_norm", hidden, None, bias=True, gguf="output_norm")
    if not is_tied:
        head.append(Tensor("lm_head.weight", "lm_head", "lm_head", (vocab, word), gguf="output"))
    return build(c, meta, vocab=vocab, hidden=hidden, layers=layers, is_tied=is_tied, embeddings=embeddings,
                 head=tuple(head), rotary_dim=0, extra=tuple(extra))  # fmt: skip
