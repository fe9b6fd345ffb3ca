"""config.json -> ModelShape: the handful of numbers that fix every weight matrix and the KV cache.

Pure: takes the parsed JSON dict, returns frozen dataclasses. Where a field is absent, the default is the one the
model's transformers configuration class uses (transformers 5.x), so counts match what transformers builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from launcher.errors import ConfigError, UnknownArchitectureError

AttnKind = Literal["gqa", "mla"]
LayerKind = Literal["full_attention", "sliding_attention"]
MlpKind = Literal["dense", "moe"]

# transformers' class defaults, per model_type, for the fields the counter reads.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False, max_position_embeddings=2048),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=4096, max_position_embeddings=4096 * 32),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, tie_word_embeddings=False,
                    sliding_window=None, num_local_experts=8, num_experts_per_tok=2,
                    max_position_embeddings=4096 * 32),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False,
                  use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False,
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                      decoder_sparse_step=1, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                      num_experts_per_tok=4, num_experts=60, mlp_only_layers=None, qkv_bias=True,
                      max_position_embeddings=32768),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False,
                  attention_bias=False, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  max_position_embeddings=32768),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=128, tie_word_embeddings=False,
                      attention_bias=False, use_sliding_window=False, sliding_window=4096,
                      max_window_layers=28, decoder_sparse_step=1, moe_intermediate_size=768,
                      num_experts_per_tok=8, num_experts=128, mlp_only_layers=None,
                      max_position_embeddings=32768),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                   attention_bias=False, sliding_window=4096, max_position_embeddings=8192),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True,
                        attention_bias=False, sliding_window=4096, sliding_window_pattern=6,
                        max_position_embeddings=131072),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                 sliding_window=None, max_position_embeddings=4096),
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, tie_word_embeddings=False,
                        attention_bias=False, first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536,
                        n_routed_experts=64, n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128, num_experts_per_tok=None, moe_intermediate_size=1407,
                        max_position_embeddings=2048),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
                        num_attention_heads=128, num_key_value_heads=128, tie_word_embeddings=False,
                        attention_bias=False, first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536,
                        n_routed_experts=256, n_shared_experts=1, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128, num_experts_per_tok=8, moe_intermediate_size=2048,
                        max_position_embeddings=4096),
    "gpt_oss": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
                    attention_bias=True, sliding_window=128, num_local_experts=128, num_experts_per_tok=4,
                    max_position_embeddings=131072),
}  # fmt: skip

# model_type aliases: same architecture, another name.
_ALIASES = {"kimi_k2": "deepseek_v3", "gemma3": "gemma3_text"}

# Multimodal wrappers whose language model sits under text_config.
_MULTIMODAL = {"gemma3": "gemma3_text"}

SUPPORTED_MODEL_TYPES = tuple(sorted([*_DEFAULTS, *_ALIASES]))


@dataclass(frozen=True)
class VisionShape:
    """A SigLIP-style vision tower plus Gemma 3's projector (the multimodal part vLLM loads)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    patch_size: int
    image_size: int
    num_channels: int
    use_head: bool
    num_attention_heads: int
    projector_out: int  # text hidden size the projector maps into


@dataclass(frozen=True)
class MoEShape:
    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int  # 0 when there is no shared expert
    shared_expert_gate: bool  # Qwen2-MoE: a 1-wide sigmoid gate on the shared expert
    router_bias: bool
    expert_bias: bool


@dataclass(frozen=True)
class MLAShape:
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelShape:
    """Everything the arithmetic needs, read from one config.json."""

    model_type: str  # canonical (aliases resolved)
    architecture: str  # the config's `architectures[0]`, or the model_type
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied_embeddings: bool
    attn_kind: AttnKind
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    fused_qkv: bool  # Phi-3: one qkv_proj (same count, but a different tensor name)
    attention_sinks: bool  # gpt-oss: one learned logit per head
    norms_per_layer: int  # RMSNorm/LayerNorm vectors of hidden_size per decoder layer
    layer_kinds: tuple[LayerKind, ...]
    mlp_kinds: tuple[MlpKind, ...]
    sliding_window: int | None
    max_position_embeddings: int | None
    torch_dtype: str | None
    moe: MoEShape | None = None
    mla: MLAShape | None = None
    vision: VisionShape | None = None
    mtp_layers: int = 0  # DeepSeek multi-token-prediction layers: in the checkpoint, not built by transformers
    quantization_config: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    defaults_used: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k == "sliding_attention")

    @property
    def num_full_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers


def _positive_int(cfg: Mapping[str, Any], key: str, source: str | None, path: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(f"must be a positive integer, got {value!r}", source=source, field=path + key)
    if value <= 0:
        raise ConfigError(f"must be a positive integer, got {value}", source=source, field=path + key)
    return value


def _opt_int(cfg: Mapping[str, Any], key: str, source: str | None, path: str) -> int | None:
    if cfg.get(key) is None:
        return None
    return _positive_int(cfg, key, source, path)


def _bool(cfg: Mapping[str, Any], key: str, source: str | None, path: str) -> bool:
    value = cfg.get(key)
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", source=source, field=path + key)
    return value


def _with_defaults(
    raw: Mapping[str, Any], model_type: str, *, extra_defaults: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    defaults = dict(_DEFAULTS[model_type])
    if extra_defaults:
        defaults.update(extra_defaults)
    used = tuple(sorted(k for k in defaults if k not in raw))
    merged = {**defaults, **{k: v for k, v in raw.items()}}
    return merged, used


def _vision_shape(vc: Mapping[str, Any], text_hidden: int, source: str | None) -> VisionShape:
    # SiglipVisionConfig defaults.
    d = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
             num_channels=3, image_size=224, patch_size=16, vision_use_head=True)  # fmt: skip
    merged = {**d, **vc}
    p = "vision_config."
    return VisionShape(
        hidden_size=_positive_int(merged, "hidden_size", source, p),
        intermediate_size=_positive_int(merged, "intermediate_size", source, p),
        num_layers=_positive_int(merged, "num_hidden_layers", source, p),
        num_attention_heads=_positive_int(merged, "num_attention_heads", source, p),
        patch_size=_positive_int(merged, "patch_size", source, p),
        image_size=_positive_int(merged, "image_size", source, p),
        num_channels=_positive_int(merged, "num_channels", source, p),
        use_head=bool(merged.get("vision_use_head", True)),
        projector_out=text_hidden,
    )


def shape_from_config(cfg: Mapping[str, Any], source: str | None = None) -> ModelShape:
    """Read a parsed config.json. Raises ConfigError naming the file and field on anything unusable."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config.json must be a JSON object", source=source)
    raw_type = cfg.get("model_type")
    if not isinstance(raw_type, str) or not raw_type:
        raise ConfigError("missing model_type: cannot tell the architecture", source=source, field="model_type")
    archs = cfg.get("architectures")
    architecture = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else raw_type

    top = cfg
    path = ""
    vision: VisionShape | None = None
    if raw_type in _MULTIMODAL:
        text = cfg.get("text_config")
        if text is None:
            text = {}
        if not isinstance(text, Mapping):
            raise ConfigError("must be an object", source=source, field="text_config")
        cfg = text
        path = "text_config."
        model_type = _MULTIMODAL[raw_type]
    else:
        model_type = _ALIASES.get(raw_type, raw_type)
    if model_type not in _DEFAULTS:
        raise UnknownArchitectureError(
            f"unknown model_type {raw_type!r} ({architecture}); vlaunch counts " + ", ".join(SUPPORTED_MODEL_TYPES),
            source=source,
            field=path + "model_type",
        )

    c, defaults_used = _with_defaults(cfg, model_type)
    vocab = _positive_int(c, "vocab_size", source, path)
    hidden = _positive_int(c, "hidden_size", source, path)
    inter = _positive_int(c, "intermediate_size", source, path)
    layers = _positive_int(c, "num_hidden_layers", source, path)
    heads = _positive_int(c, "num_attention_heads", source, path)
    kv_heads = _opt_int(c, "num_key_value_heads", source, path) or heads
    head_dim = _opt_int(c, "head_dim", source, path) or hidden // heads
    if head_dim <= 0:
        raise ConfigError("hidden_size // num_attention_heads is 0", source=source, field=path + "head_dim")
    if heads % kv_heads:
        raise ConfigError(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
            source=source,
            field=path + "num_key_value_heads",
        )
    # A multimodal wrapper carries tie_word_embeddings at the top level too; the text config's wins when set.
    tie_src = c if "tie_word_embeddings" in cfg else {**c, **{k: top[k] for k in ("tie_word_embeddings",) if k in top}}
    tied = _bool(tie_src, "tie_word_embeddings", source, path)

    max_pos = _opt_int(c, "max_position_embeddings", source, path)
    dtype = top.get("torch_dtype") or top.get("dtype") or c.get("torch_dtype") or c.get("dtype")
    quant = top.get("quantization_config")
    if quant is not None and not isinstance(quant, Mapping):
        raise ConfigError("must be an object", source=source, field="quantization_config")

    attn_kind: AttnKind = "gqa"
    qkv_bias = o_bias = mlp_bias = qk_norm = fused_qkv = sinks = False
    norms_per_layer = 2
    moe: MoEShape | None = None
    mla: MLAShape | None = None
    mlp_kinds: list[MlpKind] = ["dense"] * layers
    sliding = c.get("sliding_window")
    layer_kinds: list[LayerKind] = ["full_attention"] * layers
    mtp = 0

    if model_type in ("llama",):
        qkv_bias = o_bias = _bool(c, "attention_bias", source, path)
        mlp_bias = _bool(c, "mlp_bias", source, path)
    elif model_type in ("mistral", "mixtral"):
        pass
    elif model_type in ("qwen2", "qwen2_moe"):
        qkv_bias = bool(c.get("qkv_bias", True))  # Qwen2 always has q/k/v biases, no o bias
    elif model_type in ("qwen3", "qwen3_moe"):
        qkv_bias = o_bias = _bool(c, "attention_bias", source, path)
        qk_norm = True
    elif model_type in ("gemma2", "gemma3_text"):
        qkv_bias = o_bias = _bool(c, "attention_bias", source, path)
        norms_per_layer = 4  # input, post-attention, pre-feedforward, post-feedforward
        qk_norm = model_type == "gemma3_text"
    elif model_type == "phi3":
        fused_qkv = True
    elif model_type == "gpt_oss":
        qkv_bias = o_bias = _bool(c, "attention_bias", source, path)
        sinks = True
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        attn_kind = "mla"
        qkv_bias = o_bias = _bool(c, "attention_bias", source, path)
        mla = MLAShape(
            q_lora_rank=_opt_int(c, "q_lora_rank", source, path),
            kv_lora_rank=_positive_int(c, "kv_lora_rank", source, path),
            qk_nope_head_dim=_positive_int(c, "qk_nope_head_dim", source, path),
            qk_rope_head_dim=_positive_int(c, "qk_rope_head_dim", source, path),
            v_head_dim=_positive_int(c, "v_head_dim", source, path),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        mtp = int(c.get("num_nextn_predict_layers") or 0)

    # --- sliding-window layers ---
    explicit_types = c.get("layer_types")
    if isinstance(explicit_types, list) and explicit_types:
        if len(explicit_types) != layers:
            raise ConfigError(
                f"has {len(explicit_types)} entries for {layers} layers",
                source=source,
                field=path + "layer_types",
            )
        kinds: list[LayerKind] = []
        for i, t in enumerate(explicit_types):
            if t in ("sliding_attention", "full_attention"):
                kinds.append(t)
            else:
                raise ConfigError(f"unknown layer type {t!r}", source=source, field=f"{path}layer_types[{i}]")
        layer_kinds = kinds
    elif model_type in ("gemma2", "gpt_oss"):
        layer_kinds = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    elif model_type == "gemma3_text":
        pattern = int(c.get("sliding_window_pattern") or 6)
        layer_kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    elif model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if c.get("use_sliding_window") and sliding:
            mwl = int(c.get("max_window_layers") or 0)
            layer_kinds = ["sliding_attention" if i >= mwl else "full_attention" for i in range(layers)]
    elif model_type in ("mistral", "phi3", "mixtral") and sliding:
        layer_kinds = ["sliding_attention"] * layers
    if all(k == "full_attention" for k in layer_kinds):
        sliding = None
    elif not isinstance(sliding, int) or sliding <= 0:
        raise ConfigError("sliding-window layers need a positive window", source=source, field=path + "sliding_window")

    # --- MoE ---
    if model_type == "mixtral":
        moe = MoEShape(
            num_experts=_positive_int(c, "num_local_experts", source, path),
            experts_per_token=_positive_int(c, "num_experts_per_tok", source, path),
            expert_intermediate=inter,
            shared_intermediate=0,
            shared_expert_gate=False,
            router_bias=False,
            expert_bias=False,
        )
        mlp_kinds = ["moe"] * layers
    elif model_type == "gpt_oss":
        moe = MoEShape(
            num_experts=_positive_int(c, "num_local_experts", source, path),
            experts_per_token=_positive_int(c, "num_experts_per_tok", source, path),
            expert_intermediate=inter,
            shared_intermediate=0,
            shared_expert_gate=False,
            router_bias=True,
            expert_bias=True,
        )
        mlp_kinds = ["moe"] * layers
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        n_exp = int(c.get("num_experts") or 0)
        step = _positive_int(c, "decoder_sparse_step", source, path)
        only = set(c.get("mlp_only_layers") or [])
        if n_exp > 0:
            shared = int(c.get("shared_expert_intermediate_size") or 0) if model_type == "qwen2_moe" else 0
            moe = MoEShape(
                num_experts=n_exp,
                experts_per_token=_positive_int(c, "num_experts_per_tok", source, path),
                expert_intermediate=_positive_int(c, "moe_intermediate_size", source, path),
                shared_intermediate=shared,
                shared_expert_gate=model_type == "qwen2_moe",
                router_bias=False,
                expert_bias=False,
            )
            mlp_kinds = ["moe" if i not in only and (i + 1) % step == 0 else "dense" for i in range(layers)]
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        n_routed = _positive_int(c, "n_routed_experts", source, path)
        k_dense = int(c.get("first_k_dense_replace") or 0)
        n_shared = int(c.get("n_shared_experts") or 0)
        moe_inter = _positive_int(c, "moe_intermediate_size", source, path)
        moe = MoEShape(
            num_experts=n_routed,
            experts_per_token=int(c.get("num_experts_per_tok") or 0),
            expert_intermediate=moe_inter,
            shared_intermediate=moe_inter * n_shared,
            shared_expert_gate=False,
            router_bias=False,
            expert_bias=False,
        )
        mlp_kinds = ["dense" if i < k_dense else "moe" for i in range(layers)]

    if top is not cfg and isinstance(top.get("vision_config"), Mapping):
        vision = _vision_shape(top["vision_config"], hidden, source)

    return ModelShape(
        model_type=model_type,
        architecture=architecture,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        tied_embeddings=tied,
        attn_kind=attn_kind,
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        qk_norm=qk_norm,
        fused_qkv=fused_qkv,
        attention_sinks=sinks,
        norms_per_layer=norms_per_layer,
        layer_kinds=tuple(layer_kinds),
        mlp_kinds=tuple(mlp_kinds),
        sliding_window=sliding if isinstance(sliding, int) else None,
        max_position_embeddings=max_pos,
        torch_dtype=dtype if isinstance(dtype, str) else None,
        moe=moe,
        mla=mla,
        vision=vision,
        mtp_layers=mtp,
        quantization_config=quant,
        defaults_used=defaults_used,
    )
