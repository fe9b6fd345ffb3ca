"""Count configs the way the oracle does (transformers on the meta device) and print ORACLE.tsv rows.

usage: .venv-vllm/bin/python scripts/oracle_rows.py CONFIG.json [CONFIG.json ...] >> ROWS.tsv

(rows of a family's extra configs go to tests/fixtures/configs-v2/extra/FAMILY.tsv)

Runs scripts/oracle/worker.py (transformers' own parameter count, classified by name, then refined by the owning
module) once per config, offline. The row's `model` is the config's file stem; a multimodal config also gets a
`#full-multimodal` row that counts the towers (in `other`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = Path(__file__).parent / "oracle" / "worker.py"
COLUMNS = ("embed", "lm_head", "attn", "mlp", "norms", "other", "mixer")


def rows(config: Path) -> list[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, str(WORKER), str(config), str(out)], check=True, env=env)
        res = json.loads(out.read_text())
    if res.get("error"):
        raise SystemExit(f"{config}: {res['error']}")
    lines = []
    for row in res["rows"]:
        c = row["count"]
        b = c["buckets"]
        notes = [f"class={row['class']}", f"tied={row['tied']}", *row.get("notes", [])]
        values = [str(b[k]) for k in COLUMNS]
        name = config.stem + row["suffix"]
        lines.append("\t".join([name, res["transformers_version"], str(c["total"]), *values, "; ".join(notes)]))
    return lines


def main() -> None:
    for arg in sys.argv[1:]:
        for line in rows(Path(arg)):
            print(line)


if __name__ == "__main__":
    main()
