"""Which family reads which model_type, like vLLM's and transformers' registries.

A family module is found by its model_type's own name (launcher/model/arch/families/<model_type>.py), so adding a
family is adding one file. The tables below cover the rest: model_types read by a module of another name,
vLLM architectures whose config's model_type differs, and the model_types vLLM serves that vlaunch reads
generically (weights from safetensors headers, cache from the config's generic fields), each with why.
Nothing here imports a family module until it is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

FAMILY_PACKAGE = "launcher.model.arch.families"

# model_type -> the family module that reads it, when the names differ.
ALIASES: dict[str, str] = {
    "cohere2": "cohere",
    "deepseek_ref": "deepseek_v4",
    "deepseek_v2": "deepseek_v3",
    "deepseek_v32": "deepseek_v3",
    "ernie4_5_moe": "ernie4_5",
    "exaone_moe": "exaone4",
    "falcon_mamba": "mamba",
    "gemma3_text": "gemma3",
    "gemma3n_text": "gemma3n",
    "gemma4_text": "gemma4",
    "glm4": "glm",
    "glm_moe_dsa": "deepseek_v3",
    "gpt-sw3": "gpt2",
    "granite_swa": "granite",
    "granitemoe_swa": "granitemoe",
    "granitemoeshared": "granitemoe",
    "hunyuan_v1_dense": "hunyuan_v1",
    "hunyuan_v1_moe": "hunyuan_v1",
    "kimi_k2": "deepseek_v3",
    "lfm2_moe": "lfm2",
    "llama4_text": "llama4",
    "minimax_m3_vl": "minimax_m3",
    "minimax_m3_vl_text": "minimax_m3",
    "mixtral": "mistral",
    "nemotron-nas": "nemotron_nas",
    "olmo2": "olmo",
    "olmo3": "olmo",
    "qwen2_moe": "qwen2",
    "qwen3_5_moe": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5_text": "qwen3_5",
    "qwen3_moe": "qwen3",
    "qwen3_vl_moe": "qwen3_vl",
    "qwen4_exp_text": "qwen4_exp",
    "xlm-roberta": "roberta",
}

# vLLM architecture -> the model_type it is read as, for configs whose model_type vlaunch does not know
# (vLLM picks its implementation by architecture, so these configs are served by the same code).
ARCHITECTURES: dict[str, str] = {
    "LLaMAForCausalLM": "llama",
    "InternLM3ForCausalLM": "llama",
    "IQuestCoderForCausalLM": "llama",
    "TeleChat3ForCausalLM": "llama",
    "NemotronHPuzzleForCausalLM": "nemotron_h",
    "ExaoneMoEForCausalLM": "exaone_moe",
    "PhiMoEForCausalLM": "phimoe",
}

# vLLM 0.32's text-generation architectures (model_executor/models/registry.py: _TEXT_GENERATION_MODELS and the
# *ForCausalLM entries of _TRANSFORMERS_SUPPORTED_MODELS) and the transformers model_type each builds (or, where
# transformers 5.19 has no class for it, the model_type of the family that reads it: DeciLM, MiMo), or None where
# no family reads it (vlaunch then reads it generically).
VLLM_ARCHITECTURES: dict[str, str | None] = {
    "AfmoeForCausalLM": "afmoe",
    "ApertusForCausalLM": "apertus",
    "AXK1ForCausalLM": "axk1",
    "BailingMoeForCausalLM": None,
    "BailingMoeV2ForCausalLM": None,
    "BailingMoeV2_5ForCausalLM": None,
    "BailingMoeV3ForCausalLM": None,
    "BloomForCausalLM": "bloom",
    "ChatGLMModel": None,
    "ChatGLMForConditionalGeneration": None,
    "CohereForCausalLM": "cohere",
    "Cohere2ForCausalLM": "cohere2",
    "Cohere2MoeForCausalLM": "cohere2_moe",
    "DbrxForCausalLM": "dbrx",
    "DeciLMForCausalLM": "nemotron-nas",
    "DeepseekForCausalLM": None,
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "DeepseekV4ForCausalLM": "deepseek_v4",
    "Ernie4_5ForCausalLM": "ernie4_5",
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    "ExaoneForCausalLM": None,
    "Exaone4ForCausalLM": "exaone4",
    "ExaoneMoeForCausalLM": "exaone_moe",
    "ExaoneMoEForCausalLM": "exaone_moe",
    "FalconForCausalLM": "falcon",
    "FalconMambaForCausalLM": "falcon_mamba",
    "FalconH1ForCausalLM": "falcon_h1",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Rnj1ForCausalLM": None,
    "Gemma3nForCausalLM": "gemma3n_text",
    "Gemma4ForCausalLM": "gemma4_text",
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen4ExpForCausalLM": "qwen4_exp",
    "Glm4ForCausalLM": "glm4",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Glm5NextForCausalLM": None,
    "GptOssForCausalLM": "gpt_oss",
    "GPT2LMHeadModel": "gpt2",
    "GPTJForCausalLM": "gptj",
    "GraniteForCausalLM": "granite",
    "GraniteMoeForCausalLM": "granitemoe",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "GraniteMoeSharedForCausalLM": "granitemoeshared",
    "GraniteMoeSWAForCausalLM": "granitemoe_swa",
    "GraniteSWAForCausalLM": "granite_swa",
    "HrmTextForCausalLM": "hrm_text",
    "HYV3ForCausalLM": "hy_v3",
    "HYV4ForCausalLM": "hy_v4",
    "HCXVisionV2ForCausalLM": None,
    "HyperCLOVAXForCausalLM": "hyperclovax",
    "InternLM2ForCausalLM": None,
    "InternLM3ForCausalLM": "llama",
    "IQuestCoderForCausalLM": "llama",
    "IQuestLoopCoderForCausalLM": None,
    "JambaForCausalLM": "jamba",
    "K2HorizonForCausalLM": None,
    "KimiLinearForCausalLM": "kimi_linear",
    "Lfm2ForCausalLM": "lfm2",
    "Lfm2MoeForCausalLM": "lfm2_moe",
    "LagunaForCausalLM": "laguna",
    "LlamaForCausalLM": "llama",
    "Llama4ForCausalLM": "llama4",
    "LLaMAForCausalLM": "llama",
    "LongcatFlashForCausalLM": "longcat_flash",
    "LongcatFlashNgramForCausalLM": None,
    "MambaForCausalLM": "mamba",
    "Mamba2ForCausalLM": "mamba2",
    "MiniCPMForCausalLM": None,
    "MiniCPM3ForCausalLM": "minicpm3",
    "MiniMaxM2ForCausalLM": "minimax_m2",
    "MiniMaxM3SparseForCausalLM": "minimax_m3_vl_text",
    "InklingForCausalLM": "inkling_text",
    "InklingForConditionalGeneration": None,
    "Ministral3ForCausalLM": "ministral3",
    "MistralForCausalLM": "mistral",
    "MistralLarge3ForCausalLM": None,
    "MixtralForCausalLM": "mixtral",
    "MiMoForCausalLM": "mimo",
    "MiMoV2FlashForCausalLM": "mimo_v2_flash",
    "MiMoV2ForCausalLM": None,
    "NemotronForCausalLM": "nemotron",
    "NemotronHForCausalLM": "nemotron_h",
    "NemotronHPuzzleForCausalLM": "nemotron_h",
    "MuseGlimmerForCausalLM": None,
    "OlmoHybridForCausalLM": "olmo_hybrid",
    "OlmoeForCausalLM": "olmoe",
    "OPTForCausalLM": "opt",
    "OrionForCausalLM": None,
    "PanguEmbeddedForCausalLM": None,
    "PanguProMoEV2ForCausalLM": None,
    "PanguUltraMoEForCausalLM": None,
    "Param2MoEForCausalLM": None,
    "Phi3ForCausalLM": "phi3",
    "PhiMoEForCausalLM": "phimoe",
    "Plamo3ForCausalLM": None,
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3_5ForCausalLM": "qwen3_5",
    "Qwen3_5MoeForCausalLM": "qwen3_5_moe",
    "SarvamMoEForCausalLM": None,
    "SarvamMLAForCausalLM": None,
    "Step1ForCausalLM": None,
    "Step3TextForCausalLM": None,
    "Step3p5ForCausalLM": None,
    "StableLmForCausalLM": "stablelm",
    "SolarForCausalLM": None,
    "TeleChat2ForCausalLM": None,
    "TeleChat3ForCausalLM": "llama",
    "TeleFLMForCausalLM": None,
    "Zamba2ForCausalLM": "zamba2",
    "ArceeForCausalLM": "arcee",
    "CwmForCausalLM": "cwm",
    "FlexOlmoForCausalLM": "flex_olmo",
    "GlmForCausalLM": "glm",
    "GPTBigCodeForCausalLM": "gpt_bigcode",
    "GPTNeoXForCausalLM": "gpt_neox",
    "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense",
    "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe",
    "Jais2ForCausalLM": "jais2",
    "MellumForCausalLM": "mellum",
    "NanbeigeForCausalLM": None,
    "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2",
    "Olmo3ForCausalLM": "olmo3",
    "PhiForCausalLM": "phi",
    "SeedOssForCausalLM": "seed_oss",
    "SmolLM3ForCausalLM": "smollm3",
    "Starcoder2ForCausalLM": "starcoder2",
    "VaultGemmaForCausalLM": "vaultgemma",
}

# vLLM 0.32's pooling architectures (`--runner pooling`: _EMBEDDING_MODELS, _SEQUENCE_CLASSIFICATION_MODELS,
# _TOKEN_CLASSIFICATION_MODELS) that a family reads, and the model_type of their configs: the BERT-style encoders.
VLLM_POOLING_ARCHITECTURES: dict[str, str] = {
    "BertModel": "bert",
    "BertForMaskedLM": "bert",
    "BertSpladeSparseEmbeddingModel": "bert",
    "BertForSequenceClassification": "bert",
    "BertForTokenClassification": "bert",
    "RobertaModel": "roberta",
    "RobertaForMaskedLM": "roberta",
    "RobertaForSequenceClassification": "roberta",
    "RobertaForTokenClassification": "roberta",
    "XLMRobertaModel": "xlm-roberta",
    "BgeM3EmbeddingModel": "xlm-roberta",
    "XLMRobertaForSequenceClassification": "xlm-roberta",
    "XLMRobertaForTokenClassification": "xlm-roberta",
}

# Why an architecture vLLM serves is read generically rather than by a family.
GENERIC_REASON = (
    "transformers 5.19 has no causal-LM class for it, so there is no reference count to be exact against; "
    "weights are read from the checkpoint's safetensors headers, the cache from the config's generic fields"
)
GENERIC: dict[str, str] = {}


def module_name(model_type: str) -> str | None:
    """The family module for a model_type, or None (no import of the module itself)."""
    name = ALIASES.get(model_type, model_type)
    if not name.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(f"{FAMILY_PACKAGE}.{name}")
    except (ImportError, ValueError):
        return None
    return name if spec is not None else None


def load_family(name: str) -> ModuleType:
    return importlib.import_module(f"{FAMILY_PACKAGE}.{name}")


def all_family_modules() -> list[str]:
    """Every family module on disk (imports none)."""
    import pkgutil  # listing families is for `archs` and the tests, not for a plan

    pkg = importlib.import_module(FAMILY_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
