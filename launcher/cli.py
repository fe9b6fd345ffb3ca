"""The vlaunch command line: parse, call the library, print. Errors become one line and an exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from launcher import __version__
from launcher.errors import VlaunchError

EXIT_OK = 0
EXIT_USAGE = 2  # bad input: unreadable file, malformed config, unknown name
EXIT_DOES_NOT_FIT = 3


class _Group(click.Group):
    """Turns library errors into `vlaunch: error: …` on stderr; `--debug` (or VLAUNCH_DEBUG=1) shows tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VlaunchError as e:
            if _debug(ctx):
                raise
            click.echo(f"vlaunch: error: {e.one_line()}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("vlaunch: interrupted", err=True)
            ctx.exit(130)
        except Exception as e:
            if _debug(ctx):
                raise
            msg = " ".join(str(e).split()) or type(e).__name__
            click.echo(f"vlaunch: internal error: {msg} (run with --debug for a traceback)", err=True)
            ctx.exit(70)


def _debug(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("debug")) or os.environ.get("VLAUNCH_DEBUG") not in (None, "", "0")


def emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="vlaunch")
def main(debug: bool) -> None:
    """Size, launch and verify vLLM servers.

    vlaunch counts a model's parameters from its config.json, predicts every memory bucket and vLLM's
    KV-cache pool before launch, and checks the prediction against what vLLM logs.
    """


@main.command()
@click.argument("model")
@click.option("--format", "--quantization", "fmt", metavar="FORMAT",
              help="Storage format (bf16, fp16, fp32, fp8, int8, q8_0, awq, gptq, w4a16, q4_k_m, nvfp4, mxfp4). "
              "Default: detected from config.json.")  # fmt: skip
@click.option("--kv-cache-dtype", default="auto", show_default=True, help="vLLM's kv_cache_dtype.")
@click.option("--tensor-parallel-size", "-tp", default=1, show_default=True, type=click.IntRange(min=1),
              help="KV heads and bytes per rank.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def count(model: str, fmt: str | None, kv_cache_dtype: str, tensor_parallel_size: int, as_json: bool) -> None:
    """Count MODEL's parameters, weight bytes and KV bytes per token.

    MODEL is a config.json, a model directory, or a Hugging Face repo id (read from the local cache; only
    config.json is downloaded when it is missing and the network allows).
    """
    from launcher.counting import count_model, render_count

    result = count_model(model, fmt=fmt, kv_cache_dtype=kv_cache_dtype, tp=tensor_parallel_size)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(render_count(result))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
