"""vLLM's argparse `type` callables, by the names the interface tables give them (launcher/vllm/interface).

Each converter does what vLLM's own does to one command-line string (vllm/utils/argparse_utils.py
human_readable_int, vllm/engine/arg_utils.py optional_type / parse_type / union_dict_and_str / parse_dataclass),
so that a value vlaunch plans is the value vLLM will run, and a value vLLM refuses is refused here too. A refusal
raises ValueError with vLLM's wording where it has one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from launcher.common.units import vllm_int

human_int = vllm_int  # vLLM's human_readable_int; units holds it, with the other sizes

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def human_int_kmg(value: str) -> int:
    """human_readable_int before vLLM took t/T (0.10 and 0.11): `1t` falls through to int() and is refused."""
    m = _HUMAN.fullmatch(value.strip())
    if m and m.group(2) in "tT":
        return int(value.strip())
    return human_int(value)


def human_int_or_auto(value: str) -> int:
    """vLLM's human_readable_int_or_auto: '-1' or 'auto' (any case) is -1, vLLM's 'fit the pool' marker."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_int(value)


def _json(value: str) -> Any:
    return json.loads(value)


def dict_or_str(value: str) -> Any:
    """vLLM's union_dict_and_str: text that looks like a JSON object is parsed (`None`/'' is None), else kept."""
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return str(value)
    return optional(_json)(value)


_HUMAN_IN_JSON = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")


def dataclass_json(value: str) -> Any:
    """vLLM's parse_dataclass: bare 80g / 1K numbers outside JSON strings expanded, then a JSON object (its
    fields are validated by the config class; vlaunch reads the ones it models)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', value)
    for i in range(0, len(parts), 2):  # even indices are outside strings
        parts[i] = _HUMAN_IN_JSON.sub(lambda m: str(human_int(m.group())), parts[i])
    data = json.loads("".join(parts))
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return data


def dataclass_json_as_written(value: str) -> Any:
    """parse_dataclass before vLLM 0.20: the JSON object as written (no 1k / 80G expansion)."""
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {value!r}")
    return data


def truthy(value: str) -> bool:
    """`type=bool` (0.11's deprecated guided-decoding switches): '' is False, any other text True."""
    return bool(value)


def none_as_empty(value: str) -> str:
    """parse_reasoning_parser (0.33+): `none` in any case is '' (no parser); anything else as written."""
    return "" if value.lower() == "none" else value


def optional(inner: Callable[[str], Any]) -> Callable[[str], Any]:
    """vLLM's optional_type: '' and 'None' are None; anything else goes to the inner type."""

    def convert(value: str) -> Any:
        if value in ("", "None"):
            return None
        return inner(value)

    return convert


def port(value: str) -> int:
    """vLLM's check_port (FlexibleArgumentParser): an integer from 1024 to 65535."""
    try:
        n = int(value)
    except ValueError:
        raise ValueError("Port must be an integer") from None
    if not 1024 <= n <= 65535:
        raise ValueError("Port must be between 1024 and 65535")
    return n


def _int_or_str_list(value: str) -> list[int | str]:
    """--device-ids: comma-separated, digits read as ints."""
    return [int(p) if p.isdigit() else p for p in (part.strip() for part in value.split(","))]


_BY_NAME: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": _json,
    "human_int": human_int,
    "human_int_or_auto": human_int_or_auto,
    "human_int_kmg": human_int_kmg,
    "dict_or_str": dict_or_str,
    "lower_underscore": lambda s: s.lower().replace("-", "_"),
    "int_or_str_list": _int_or_str_list,
    "port": port,
    "truthy": truthy,
    "none_as_empty": none_as_empty,
}


def converter(name: str) -> Callable[[str], Any]:
    """The converter a table's type name stands for; an unknown name keeps the text as written."""
    if name.startswith("optional:"):
        return optional(converter(name[len("optional:") :]))
    if name.startswith("dataclass:"):
        return dataclass_json
    if name.startswith("dataclass_json:"):
        return dataclass_json_as_written
    return _BY_NAME.get(name, str)


def convert(name: str, value: str) -> Any:
    """One command-line string through vLLM's type `name`. Raises ValueError when vLLM refuses it."""
    try:
        return converter(name)(value)
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except (ValueError, TypeError) as e:
        raise ValueError(str(e) or f"invalid value {value!r}") from None
