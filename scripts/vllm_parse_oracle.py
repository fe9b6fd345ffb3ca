"""vLLM's own reading of `vllm serve` command lines: the oracle vlaunch's parser is tested against.

Reads JSON lines on stdin, each a list of the words after `vllm serve`, and writes one JSON line per input:
{"values": {dest: value}} with what vLLM's parser (FlexibleArgumentParser + the serve subparser, as vLLM's CLI
main builds them) and EngineArgs.from_cli_args make of it, or {"refused": "<why>"} when vLLM refuses it.
The values are EngineArgs' fields after from_cli_args, with the two steps vLLM takes before any model is read:
the positional model replaces --model (`vllm serve`), and --spec-method / --spec-model / --spec-tokens merge into
the speculative config (EngineArgs.create_speculative_config).

Run with the python that has vLLM:  .venv-vllm/bin/python scripts/vllm_parse_oracle.py < commands.jsonl
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import os
import sys
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ["HF_HUB_OFFLINE"] = "0"  # keep repo ids as written (offline mode rewrites them to cache paths)


def _parser() -> Any:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    make_arg_parser(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    return top


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    return repr(value)


def _speculative(ea: Any) -> Any:
    """EngineArgs.create_speculative_config's merge of the --spec-* flags, before any model is read."""
    spec = dict(ea.speculative_config) if isinstance(ea.speculative_config, dict) else ea.speculative_config
    for flag, key, value in (
        ("--spec-method", "method", getattr(ea, "spec_method", None)),
        ("--spec-model", "model", getattr(ea, "spec_model", None)),
        ("--spec-tokens", "num_speculative_tokens", getattr(ea, "spec_tokens", None)),
    ):
        if value is None:
            continue
        spec = spec if spec is not None else {}
        if key in spec:
            raise ValueError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = value
    if spec is None:
        return None
    return {k.replace("-", "_"): v for k, v in spec.items()}


def read(top: Any, words: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    sink = io.StringIO()
    try:
        with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
            ns = top.parse_args(["serve", *words])
            if getattr(ns, "model_tag", None) is not None:
                ns.model = ns.model_tag
            ea = AsyncEngineArgs.from_cli_args(ns)
            spec = _speculative(ea)
    except SystemExit:
        lines = [line for line in sink.getvalue().splitlines() if "error:" in line]
        return {"refused": lines[-1] if lines else "argparse exited"}
    except Exception as e:  # vLLM refuses: a ValueError, a TypeError, a pydantic ValidationError …
        return {"refused": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    values = {f.name: _plain(getattr(ea, f.name)) for f in dataclasses.fields(ea)}
    values["speculative_config"] = _plain(spec)
    for key in ("host", "port", "served_model_name", "model_tag"):
        values[key] = _plain(getattr(ns, key, None))
    return {"values": values}


def main() -> int:
    top = _parser()
    for line in sys.stdin:
        if not line.strip():
            continue
        sys.stdout.write(json.dumps(read(top, json.loads(line)), default=repr) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
