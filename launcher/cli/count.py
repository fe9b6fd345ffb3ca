"""`vlaunch count`: a model's parameters, weight bytes and KV bytes per token."""

from __future__ import annotations

import click

from launcher.cli.options import json_option
from launcher.cli.output import emit_json


@click.command()
@click.argument("model")
@click.option("--format", "--quantization", "fmt", metavar="FORMAT",
              help="Storage format (bf16, fp16, fp32, fp8, int8, q8_0, awq, gptq, w4a16, q4_k_m, nvfp4, mxfp4). "
              "Default: detected from config.json.")  # fmt: skip
@click.option("--kv-cache-dtype", default="auto", show_default=True, help="vLLM's kv_cache_dtype.")
@click.option("--tensor-parallel-size", "-tp", default=1, show_default=True, type=click.IntRange(min=1),
              help="KV heads and bytes per rank.")  # fmt: skip
@json_option
def count(model: str, fmt: str | None, kv_cache_dtype: str, tensor_parallel_size: int, as_json: bool) -> None:
    """Count MODEL's parameters, weight bytes and KV bytes per token.

    MODEL is a config.json, a model directory, or a Hugging Face repo id (read from the local cache; only
    config.json is downloaded when it is missing and the network allows).
    """
    from launcher.model.counting import count_model, render_count

    result = count_model(model, fmt=fmt, kv_cache_dtype=kv_cache_dtype, tp=tensor_parallel_size)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(render_count(result))
