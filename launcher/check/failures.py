"""The extractors of why a start-up failed (memory, an invalid configuration, an error), and `conclude`: what the
end of a log adds to what its lines said."""

from __future__ import annotations

from typing import TYPE_CHECKING

import regex as re

from launcher.check.facts import Failure
from launcher.vllm.logs import (
    CUDA_OOM,
    ENGINE_INIT_FAILED,
    ERROR_LINE,
    GRAPH_CAPTURE_FRAME,
    INVALID_CONFIG,
    KV_TOO_SMALL_V0,
    KV_TOO_SMALL_V1,
    MAMBA_BLOCKS,
    NO_KV_MEMORY,
    SAMPLER_OOM,
    WORKER_KILLED,
    number,
)

if TYPE_CHECKING:
    from launcher.check.extract import Match, Rule
    from launcher.check.parser import LogParser

# A line at WARNING, DEBUG or INFO level (vLLM's, uvicorn's, NCCL's, a Python warning): what it says about the
# environment only hints at a failure; it becomes one when the launch failed without starting.
NOT_FATAL = re.compile(r"\b(?:WARN(?:ING)?|DEBUG|INFO)\b(?=:| \d\d-\d\d )|\bNCCL WARN\b|\b\w*Warning: ")


def _num(s: str | None) -> float | None:
    return None if s is None else number(s)


def _int(s: str | None) -> int | None:
    return None if s is None else int(number(s))


def _round_util_down(x: float) -> float:
    return max(0.01, int(x * 100) / 100)


def gate_failure(p: LogParser, m: Match, text: str) -> None:
    """vLLM's start-up check of the free memory (GPU or CPU node) failed."""
    f = p.facts
    free, total = number(m["free"]), number(m["total"])
    f.free_memory_gib, f.total_memory_gib = free, total
    util = _num(m["util"])
    req = _num(m["req"])
    if req is not None:
        f.requested_memory_gib = req
    if util is not None:
        f.gpu_memory_utilization = f.gpu_memory_utilization or util
    cpu = "node" in m.re.pattern and "Available memory on node" in text
    f.device = "cpu" if cpu else (f.device or "cuda")
    ok_util = _round_util_down((free - (0.25 if not cpu else 0.1)) / total) if total else None
    where = f"node {m['node']}" if cpu else (m["device"] if m.groupdict().get("device") else "the GPU")
    msg = (
        f"vLLM asked for {req} GiB ({util} × {total} GiB) but only {free} GiB was free on {where}: another "
        "process holds the memory"
        if req is not None
        else f"only {free} of {total} GiB was available on {where}"
    )
    p.fail(
        Failure(
            "insufficient_free_memory",
            msg,
            f"stop the other process, or --gpu-memory-utilization {ok_util} (fits the {free} GiB free)",
        )
    )


def kv_too_small_v1(p: LogParser, m: Match, text: str) -> None:
    f = p.facts
    est = _int(m["est"])
    fix = (
        f"--max-model-len {est} (vLLM's estimate), or raise --gpu-memory-utilization, or --kv-cache-dtype fp8"
        if est
        else "raise --gpu-memory-utilization or lower --max-model-len"
    )
    p.fail(
        Failure(
            "kv_too_small_for_max_model_len",
            f"one {m['mml']}-token request needs {m['need']} GiB of KV cache; only {m['avail']} GiB is left",
            fix,
            est,
        )
    )
    f.max_model_len = f.max_model_len or int(m["mml"])
    f.available_kv_gib = f.available_kv_gib if f.available_kv_gib is not None else number(m["avail"])


def kv_too_small_v0(p: LogParser, m: Match, text: str) -> None:
    tokens = int(m["tokens"])
    p.fail(
        Failure(
            "kv_too_small_for_max_model_len",
            f"max_model_len {m['mml']} is more than the {tokens} tokens the KV cache holds",
            f"--max-model-len {tokens}, or raise --gpu-memory-utilization, or --kv-cache-dtype fp8",
            tokens,
        )
    )
    p.facts.max_model_len = p.facts.max_model_len or int(m["mml"])


def mamba_blocks(p: LogParser, m: Match, text: str) -> None:
    """FULL decode CUDA graphs need one state block per sequence: the pool holds fewer than max_num_seqs."""
    blocks = int(m["blocks"])
    p.fail(
        Failure(
            "mamba_blocks_below_max_num_seqs",
            f"max_num_seqs {m['seqs']} is more than the {blocks} Mamba cache blocks the pool holds (one per decoding "
            "sequence with FULL CUDA graphs)",
            f"--max-num-seqs {blocks} (vLLM's advice), or raise --gpu-memory-utilization, or --enforce-eager",
            None,
        )
    )
    p.facts.num_blocks = p.facts.num_blocks if p.facts.num_blocks is not None else blocks


def no_kv_memory(p: LogParser, m: Match, text: str) -> None:
    p.fail(
        Failure(
            "no_kv_memory",
            "nothing was left for the KV cache after weights, activations and overhead",
            "raise --gpu-memory-utilization, use a smaller format (fp8/awq), or lower --max-num-seqs",
        )
    )


def cuda_oom(p: LogParser, m: Match, text: str) -> None:
    if sampler := p.search(SAMPLER_OOM, text):
        fix = f"--max-num-seqs {max(1, int(sampler['n']) // 2)}, or lower --gpu-memory-utilization"
        msg = f"CUDA ran out of memory warming up the sampler with {sampler['n']} dummy requests"
    elif any(GRAPH_CAPTURE_FRAME.search(x) for x in (text, *p.recent)):
        fix = "lower --gpu-memory-utilization (CUDA graphs are captured outside the budget), or --enforce-eager"
        msg = "CUDA ran out of memory capturing CUDA graphs"
    else:
        fix = "lower --gpu-memory-utilization or --max-num-batched-tokens, or free GPU memory"
        msg = "CUDA ran out of memory during start-up"
    p.fail(Failure("cuda_oom", msg, fix), refine=p.continued)  # the rest of a wrapped line says more


def worker_killed(p: LogParser, m: Match, text: str) -> None:
    killed = m["code"] == "-9"
    msg = f"vLLM's worker {m['worker']} died (exit code {m['code']}" + (
        ", SIGKILL: the kernel's OOM killer, most likely)" if killed else ")"
    )
    fix = (
        "lower --gpu-memory-utilization: on shared memory (CPU backend, DGX Spark) each tensor-parallel "
        "worker claims that share of the whole memory, and the OS needs its own"
        if killed
        else "read the worker's error above"
    )
    p.fail(Failure("worker_killed", msg, fix))


def invalid_config(p: LogParser, m: Match, text: str) -> None:
    fix = "lower --max-model-len" if m["mml"] else "fix the flag named in the message"
    if m["platform"]:
        fix = "--distributed-executor-backend mp (this platform runs tensor parallel without Ray)"
    if m["mml"]:
        fix = f"lower --max-model-len to the model's limit ({m['what']}), or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    error = p.search(ERROR_LINE, text)
    p.fail(Failure("invalid_config", (error["message"] if error else m.group(0)).strip()[:500], fix))


def engine_init_failed(p: LogParser, m: Match, text: str) -> None:
    p.engine_failed = True


def error_line(p: LogParser, m: Match, text: str) -> None:
    # an exception a WARNING / INFO line quotes ("… fd limit errors like `OSError: …`") is not an error
    if NOT_FATAL.search(text, 0, m.start()):
        return
    if p.continued and p.error_in_record and p.error_lines:
        p.error_lines[-1] = m["message"].strip()  # the same message, continued
    else:
        p.error_lines.append(m["message"].strip())
        if len(p.error_lines) > 8:
            del p.error_lines[0]
    p.error_in_record = True


FAILURE_RULES: tuple[Rule, ...] = (
    ((KV_TOO_SMALL_V1, kv_too_small_v1), (KV_TOO_SMALL_V0, kv_too_small_v0)),
    ((MAMBA_BLOCKS, mamba_blocks),),
    ((NO_KV_MEMORY, no_kv_memory),),
    ((CUDA_OOM, cuda_oom),),
    ((WORKER_KILLED, worker_killed),),
    ((INVALID_CONFIG, invalid_config),),
    ((ENGINE_INIT_FAILED, engine_init_failed),),
    ((ERROR_LINE, error_line),),
)


def conclude(p: LogParser) -> None:
    """What the whole log says that no line does: the failure of a start-up that stopped without naming one."""
    f = p.facts
    if (
        f.failure is None
        and p.engine_failed
        and f.available_kv_gib is not None
        and f.kv_pool_tokens is None
        and f.num_blocks is None
    ):
        _failed_sizing_the_pool(p, f.available_kv_gib)
    up = f.kv_pool_tokens is not None or f.num_blocks is not None or f.api_ready
    if p.hints and not up and (f.failure is not None or p.error_lines or p.engine_failed):
        # The launch failed: what the warnings said about the environment explains it (a driver too old for
        # torch is a warning, then vLLM finds no platform).
        for kind, hint in p.hints.items():
            repo = kind == "repo_access"
            p.fail(p.repo.failure() if repo else hint, refine=repo)
    if f.failure is None and not f.started and (p.error_lines or p.engine_failed):
        root = [e for e in p.error_lines if not ENGINE_INIT_FAILED.search(e)]
        msg = (root or p.error_lines or ["the engine core failed to start"])[-1]
        f.failure = Failure("other", msg[:500], "read the error above; it is not a memory failure vlaunch knows")


def _failed_sizing_the_pool(p: LogParser, available_kv_gib: float) -> None:
    # Between "Available KV cache memory" and the pool line only the KV-cache checks can fail.
    if available_kv_gib <= 0:
        p.facts.failure = Failure(
            "no_kv_memory",
            f"the engine failed with {available_kv_gib} GiB available for the KV cache",
            "raise --gpu-memory-utilization, use a smaller format (fp8/awq), or lower --max-num-seqs",
        )
    else:
        p.facts.failure = Failure(
            "kv_too_small_for_max_model_len",
            f"the engine failed right after sizing the KV cache ({available_kv_gib} GiB available): "
            "one max_model_len request does not fit",
            "lower --max-model-len, raise --gpu-memory-utilization, or --kv-cache-dtype fp8",
        )
