"""`vlaunch plan`: profile + flags + machine -> the plan's steps (pipeline) -> a Plan to print or launch.

The steps do the I/O (config, checkpoint headers, /proc readings) first and the arithmetic after; the arithmetic
lives in budget and vllm_pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any

from launcher.common.errors import ConfigError, ProfileError
from launcher.common.files import expand_user
from launcher.common.records import dataclass
from launcher.common.redact import Masker
from launcher.model import formats
from launcher.model.arch.model import Model
from launcher.model.modelsource import ModelSource
from launcher.plan import budget, pipeline
from launcher.plan.argv import vllm_argv
from launcher.plan.cache import PlanCache
from launcher.plan.machines import Machine, MemoryReading
from launcher.plan.profiles import Profile
from launcher.plan.resolve import PlanOptions, stored_format
from launcher.vllm import pool as vp
from launcher.vllm import versions as V
from launcher.vllm.detect import Detected


@dataclass(frozen=True)
class Plan:
    profile: Profile
    source: ModelSource
    shape: Model
    spec: formats.FormatSpec
    machine: Machine
    reading: MemoryReading | None
    prediction: budget.Prediction
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    invalid: str | None = None  # vLLM's own refusal text for impossible settings
    ranks: tuple[dict[str, Any], ...] = ()  # every rank: its stage, node, buckets and blocks
    version_found: Detected | None = None  # how the vLLM version was found (stated, python, image, assumed)
    use_calibration: bool = True  # False: planned without terms calibrated from earlier runs (--no-calibration)
    served_model: str = ""  # what vLLM is told to serve (the profile's model, unless that is a config.json)
    detect: bool = False  # True: the launch's python could be run to read its vLLM version (serve, --detect-version)
    steps: pipeline.Steps | None = field(default=None, compare=False, repr=False)  # how make_plan came to it

    @property
    def fits(self) -> bool:
        return self.invalid is None and self.prediction.fits

    @property
    def request(self) -> dict[str, Any]:
        """What the launch asks of vLLM: every vLLM field the plan sets (vLLM's names) and its value; any other
        field is left to vLLM's default."""
        from launcher.plan.argv import engine_values

        v = self.profile.vllm
        out: dict[str, Any] = {"model": self.served_model or self.profile.model, "host": v.host, "port": v.port}
        out.update(engine_values(self.profile, self.prediction, self.spec, self.stored))
        return out

    @property
    def shown_argv(self) -> list[str]:
        """The launch command as vlaunch prints and records it: secret values (`--api-key`, `-e HF_TOKEN=…`)
        masked. `argv` is what runs."""
        return Masker.of(self.argv, self.env).argv(self.argv)

    @property
    def shown_env(self) -> dict[str, str]:
        """The profile's environment for vLLM as printed and recorded: secret-named variables masked."""
        return Masker.of(self.argv, self.env).env(self.env)

    @property
    def stored(self) -> formats.FormatSpec:
        """The format the checkpoint's weights are stored in (what its quantization_config says)."""
        if self.steps is not None:
            return self.steps.request.stored
        return stored_format(self.shape, self.source)

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        reasons = ([self.invalid] if self.invalid else []) + list(p.reasons)
        return {
            "profile": self.profile.name,
            "model": self.profile.model,
            "model_type": self.shape.model_type,
            "config": self.source.config_path,
            "machine": self.machine.name,
            "machine_total_bytes": self.machine.total_bytes,
            "machine_total_source": self.machine.source,
            "vllm_version": V.fmt_version(p.args.version),
            "vllm_version_source": self.version_found.source if self.version_found else "stated",
            "vllm_version_detail": self.version_found.detail if self.version_found else "",
            "vllm_version_warnings": list(self.version_found.warnings) if self.version_found else [],
            "format": self.spec.describe(),
            **_figures_json(self),
            "fits": self.fits,
            "failure": "invalid_config" if self.invalid else p.failure,
            "reasons": reasons,
            "fixes": list(p.fixes),
            "notes": list(p.notes),
            "engine": p.args.to_json(),
            "kv_layout": p.layout.to_json(),
            "activation": p.activation.to_json(),
            "reading": self.reading.to_json() if self.reading else None,
            "ranks": list(self.ranks),
            "bottleneck_rank": next((r["rank"] for r in self.ranks if r["bottleneck"]), 0),
            "vllm_argv": self.shown_argv,
            "vllm_request": {k: list(v) if isinstance(v, tuple) else v for k, v in self.request.items()},
            "vllm_env": self.shown_env,
            "predicted_log_line": vp.format_tokens_line(p.pool, p.args.max_model_len, p.args.version, p.args.platform),
            **_terms_json(self),
        }


def _terms_json(plan: Plan) -> dict[str, Any]:
    """The bottleneck rank's memory besides KV as named terms, and what it adds once the pool is carved."""
    steps = plan.steps
    if steps is None:
        return {"non_kv_terms": [], "post_pool": None}
    from launcher.plan.buckets import tp_link
    from launcher.plan.terms import TermSource, non_kv_terms, post_pool

    worst = steps.verdict.worst
    req, rb = steps.buckets.requests[worst], steps.buckets.ranks[worst]
    slots = steps.weights.slots
    _, link_basis = tp_link(steps.request, slots, slots[worst])
    reserve: TermSource = "given" if plan.profile.os_reserve_gib != "auto" else "default"
    if reserve == "default" and plan.reading is not None and plan.machine.unified:
        reserve = "measured"
    terms = non_kv_terms(req, rb, link_basis, reserve)
    return {
        "non_kv_terms": [t.to_json() for t in terms],
        "post_pool": post_pool(rb, plan.prediction.requested_bytes),
    }


def _figures_json(plan: Plan) -> dict[str, Any]:
    """The plan's figures in its JSON: buckets, layout, pool, users and utilization."""
    p = plan.prediction
    return {
        "weights_bytes": p.weights_bytes,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_request_bytes": p.kv_need_bytes // max(plan.profile.users, 1),
        "kv_need_bytes": p.kv_need_bytes,
        "state_bytes_per_request": p.state_bytes_per_request,
        "state_request_bytes": p.state_request_bytes,
        "state_need_bytes": p.state_need_bytes,
        "block_size": p.layout.block_size,
        "mamba_block_size": _mamba_block_size(p),
        "padding_layers": sum(p.layout.padding_layers),
        "kv_cache_groups": len(p.layout.groups),
        "activation_peak_bytes": p.activation_peak_bytes,
        "non_torch_bytes": p.non_torch_bytes,
        "cudagraph_bytes": p.cudagraph_bytes,
        "cuda_context_bytes": p.context_bytes,
        "os_reserve_bytes": p.os_reserve_bytes,
        "overhead_bytes": p.overhead_bytes,
        "total_bytes": p.plan_total_bytes,
        "requested_bytes": p.requested_bytes,
        "available_kv_bytes": p.available_kv_bytes,
        "kv_pool_bytes": p.pool.pool_bytes,
        "kv_pool_blocks": p.pool.num_blocks,
        "kv_pool_tokens": p.pool.tokens,
        "max_concurrency": round(p.pool.max_concurrency, 2),
        "users": plan.profile.users,
        "max_users": p.max_users,
        "max_model_len": p.args.max_model_len,
        "gpu_memory_utilization": p.gpu_memory_utilization,
        "gpu_memory_utilization_reason": p.util_reason,
        "biggest_bucket": p.biggest_bucket,
    }


def _mamba_block_size(p: budget.Prediction) -> int | None:
    """Tokens one state block stands for (MambaModelConfig): the attention block with prefix caching, the
    whole max_model_len without."""
    if not p.layout.mamba_page_bytes:
        return None
    return p.layout.block_size if p.args.mamba_cache_mode in ("align", "all") else p.args.max_model_len


def make_plan(
    profile: Profile,
    *,
    live: bool = True,
    free_bytes: int | None = None,
    cpu_rss_bytes: int | None = None,
    use_calibration: bool = True,
    notes: tuple[str, ...] = (),
    detect: bool = False,
    cache: PlanCache | None = None,
) -> Plan:
    """Run the plan's steps (pipeline.run). `max_model_len: auto` is planned at the model's length, then, where one
    request of that does not fit the pool, at the length vLLM's auto-fit settles on. `notes`: what reading the
    request noticed (a wrapper not repeated), said first. `detect`: the launch's python may be run to read its
    vLLM version when its files do not say it (serve, --detect-version); planning alone runs nothing. `cache`:
    shared by plans of one model (fit); a plan's ranks share a fresh one otherwise. The plan's `steps` are the
    steps' outputs."""
    options = PlanOptions(live, free_bytes, cpu_rss_bytes, use_calibration, None, detect)
    cache = PlanCache() if cache is None else cache
    plan = plan_of(pipeline.run(profile, options, cache))
    return _noted(_auto_fit(profile, plan, options, cache), notes)


def plan_of(steps: pipeline.Steps) -> Plan:
    """The plan the steps come to, with the launch command."""
    r, v = steps.request, steps.verdict
    argv, launch_env = vllm_argv(r.profile, v.prediction, r.spec, r.stored, model=v.served_model)
    return Plan(
        r.profile,
        r.source,
        r.shape,
        r.spec,
        r.machine,
        r.reading,
        v.prediction,
        tuple(argv),
        tuple(launch_env.items()),
        v.invalid,
        v.ranks,
        r.detected,
        r.options.use_calibration,
        v.served_model,
        r.options.detect,
        steps,
    )


def _amended(plan: Plan, prediction: budget.Prediction | None = None, invalid: str | None = None) -> Plan:
    """The plan with its prediction or refusal replaced, in its steps too."""
    pred = plan.prediction if prediction is None else prediction
    invalid = plan.invalid if invalid is None else invalid
    steps = plan.steps
    if steps is not None:
        steps = dataclasses.replace(steps, verdict=dataclasses.replace(steps.verdict, prediction=pred, invalid=invalid))
    return dataclasses.replace(plan, prediction=pred, invalid=invalid, steps=steps)


def _noted(plan: Plan, notes: tuple[str, ...]) -> Plan:
    if not notes:
        return plan
    p = plan.prediction
    return _amended(plan, dataclasses.replace(p, notes=(*notes, *p.notes)))


def _auto_fit(profile: Profile, plan: Plan, options: PlanOptions, cache: PlanCache) -> Plan:
    """`max_model_len: auto`: the plan again at the length vLLM's auto-fit settles on, where the model's does not
    fit."""
    if profile.max_model_len != "auto":
        return plan
    p = plan.prediction
    if not V.AUTO_FIT_MAX_MODEL_LEN.on(p.args.version):
        since = V.fmt_version(V.AUTO_FIT_MAX_MODEL_LEN.since)
        why = f"vLLM {V.fmt_version(p.args.version)} takes no --max-model-len auto (vLLM {since}+)"
        return _amended(plan, invalid=plan.invalid or why)
    fitted = vp.auto_fit_max_model_len(p.layout, p.args.context(), p.available_kv_bytes)
    if fitted <= 0:
        return plan  # not one token fits: the plan's reasons say why
    if fitted >= p.args.max_model_len:
        note = f"max_model_len auto: the model's {p.args.max_model_len:,} tokens fit the pool"
        return _amended(plan, dataclasses.replace(p, notes=(*p.notes, note)))
    again = plan_of(pipeline.run(profile, dataclasses.replace(options, max_model_len=fitted), cache))
    q = again.prediction
    note = f"max_model_len auto: vLLM reduces {p.args.max_model_len:,} to {fitted:,} tokens to fit the pool"
    return _amended(again, dataclasses.replace(q, notes=(*q.notes, note)))


def profile_from_flags(model: str | None, config: str | None, **fields: Any) -> Profile:
    """A profile built from command-line flags alone (`vlaunch plan --model … --machine …`)."""
    from launcher.plan.profiles import profile_from_mapping

    if not model and not config:
        raise ProfileError("give a PROFILE, or --model / --config", field="model")
    data: dict[str, Any] = {"model": model or config, "name": "command-line"}
    if config:
        data["config"] = config
        try:
            found = Path(expand_user(config, ConfigError)).exists()
        except (OSError, ValueError) as e:  # a name too long for the filesystem, a NUL byte
            raise ConfigError(f"cannot read: {getattr(e, 'strerror', None) or e}", source=config) from None
        if not found:
            raise ConfigError("no such file", source=config)
    data.update({k: v for k, v in fields.items() if v is not None})
    return profile_from_mapping(data, source=None, base_dir=Path.cwd())
