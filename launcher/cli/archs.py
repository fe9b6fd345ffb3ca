"""`vlaunch archs`: every model_type vlaunch reads, and how exactly."""

from __future__ import annotations

import click

from launcher.cli.options import json_option
from launcher.cli.output import emit_json


@click.command()
@json_option
def archs(as_json: bool) -> None:
    """List every model_type vlaunch reads: its family, its layer kinds and how exactly it is counted.

    exact: a family module reproduces transformers' parameters and the layer map. generic: vLLM serves the
    architecture but no family reads it; weights come from the checkpoint's safetensors headers and the cache from
    the config's generic fields.
    """
    from launcher.model.archs import list_archs

    rows = list_archs()
    if as_json:
        emit_json(
            {
                "archs": [r.to_json() for r in rows],
                "exact": sum(1 for r in rows if r.support == "exact"),
                "generic": sum(1 for r in rows if r.support == "generic"),
            }
        )
        return
    width = max(len(r.model_type or "-") for r in rows)
    for r in rows:
        kinds = ", ".join(f"{n} {k}" for k, n in r.layer_kinds.items())
        extra = "".join([f", {r.towers} tower(s)" if r.towers else "", f", {r.mtp_layers} MTP" if r.mtp_layers else ""])
        what = kinds + extra if r.support == "exact" else ", ".join(r.architectures)
        click.echo(f"{(r.model_type or '-'):<{width}}  {r.support:<7}  {r.family:<18}  {what}")
    n_exact = sum(1 for r in rows if r.support == "exact")
    click.echo(f"\n{n_exact} model_types read exactly, {len(rows) - n_exact} vLLM architectures read generically")
