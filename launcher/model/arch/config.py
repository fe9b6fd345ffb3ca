"""A config.json (or one of its sub-configs) with a family's class defaults behind it.

Every getter names the field in its error (`text_config.num_key_value_heads`), and every default that a
getter falls back to is recorded, so `count` can say which numbers came from transformers' class defaults
rather than from the file. Pure: no I/O.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import Any

from launcher.common.errors import ConfigError

_MISSING = object()

# Bounds no real model comes near: a config beyond them is a mistake (or an attack), not a model to count.
MAX_LAYERS = 4096
MAX_DIM = 1 << 40
_LAYER_KEYS = frozenset({"num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_nextn_predict_layers",
                         "mtp_num_hidden_layers", "num_mtp_layers"})  # fmt: skip


class Cfg:
    """Typed access to config fields: the file's value, else the class default, else an error."""

    def __init__(
        self,
        raw: Mapping[str, Any],
        defaults: Mapping[str, Any] | None = None,
        *,
        source: builtins.str | None = None,
        path: builtins.str = "",
        used: builtins.set[builtins.str] | None = None,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.raw = raw
        # transformers' attribute_map: a public name -> the name the config stores (and to_dict writes)
        self.aliases = dict(aliases or {})
        self.defaults = dict(defaults or {})
        self.source = source
        self.path = path  # "text_config." for a wrapped language model
        self.used: builtins.set[builtins.str] = used if used is not None else set()

    # ---- raw access -------------------------------------------------------------------------------------------
    def _raw_key(self, key: builtins.str) -> builtins.str | None:
        """The key under which the file holds `key`: itself, or its attribute_map twin."""
        if key in self.raw:
            return key
        other = self.aliases.get(key)
        if other is not None and other in self.raw:
            return other
        for public, stored in self.aliases.items():
            if stored == key and public in self.raw:
                return public
        return None

    def has(self, key: builtins.str) -> builtins.bool:
        k = self._raw_key(key)
        return k is not None and self.raw[k] is not None

    def get(self, key: builtins.str, default: Any = _MISSING) -> Any:
        """The file's value; else the class default (recorded); else `default`."""
        k = self._raw_key(key)
        if k is not None:
            return self.raw[k]
        if key in self.defaults:
            self.used.add(self.path + key)
            return self.defaults[key]
        if default is _MISSING:
            return None
        return default

    def error(self, message: builtins.str, key: builtins.str) -> ConfigError:
        return ConfigError(message, source=self.source, field=self.path + key)

    # ---- typed getters ----------------------------------------------------------------------------------------
    def int(self, key: builtins.str, default: Any = _MISSING) -> builtins.int:
        """A positive integer."""
        value = self.get(key, default)
        n = _as_int(value)
        if n is None or n <= 0:
            raise self.error(f"must be a positive integer, got {value!r}", key)
        return self._bounded(key, n)

    def _bounded(self, key: builtins.str, n: builtins.int) -> builtins.int:
        limit = MAX_LAYERS if key in _LAYER_KEYS else MAX_DIM
        if n > limit:
            raise self.error(f"{n} is beyond any real model (at most {limit})", key)
        return n

    def int0(self, key: builtins.str, default: Any = _MISSING) -> builtins.int:
        """A non-negative integer (None counts as 0)."""
        value = self.get(key, default)
        if value is None:
            return 0
        n = _as_int(value)
        if n is None or n < 0:
            raise self.error(f"must be a non-negative integer, got {value!r}", key)
        return self._bounded(key, n)

    def opt_int(self, key: builtins.str, default: Any = _MISSING) -> builtins.int | None:
        """A positive integer or None."""
        value = self.get(key, default)
        if value is None:
            return None
        return self.int(key, default)

    def bool(self, key: builtins.str, default: Any = _MISSING) -> builtins.bool:
        value = self.get(key, default)
        if value is None and default is not _MISSING and default is not None:
            return bool(default)
        if not isinstance(value, bool):
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise self.error(f"must be true or false, got {value!r}", key)
        return value

    def float(self, key: builtins.str, default: Any = _MISSING) -> builtins.float:
        """A finite number within MAX_DIM either side of 0 (a factor, a multiplier: NaN and 1e308 are not)."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"must be a number, got {value!r}", key)
        x = float(value) if abs(value) <= MAX_DIM else math.inf
        if not math.isfinite(x):
            raise self.error(f"must be a finite number of at most {MAX_DIM:,} either side of 0, got {value!r}", key)
        return x

    def str(self, key: builtins.str, default: Any = _MISSING) -> builtins.str | None:
        value = self.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(f"must be a string, got {value!r}", key)
        return value

    def list(self, key: builtins.str, default: Any = _MISSING) -> builtins.list[Any] | None:
        """A list of strings, numbers, booleans or nulls (layer types, windows): a nested list or mapping in it is
        an error naming its index."""
        value = self.get(key, default)
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise self.error(f"must be a list, got {type(value).__name__}", key)
        for i, v in enumerate(value):
            if isinstance(v, list | tuple | dict):
                raise self.error(f"must hold strings or numbers, got a {type(v).__name__} at index {i}", key)
        return list(value)

    def int_list(self, key: builtins.str, default: Any = _MISSING) -> builtins.list[builtins.int] | None:
        values = self.list(key, default)
        if values is None:
            return None
        out = []
        for i, v in enumerate(values):
            n = _as_int(v)
            if n is None:
                raise ConfigError(f"must be an integer, got {v!r}", source=self.source, field=f"{self.path}{key}[{i}]")
            out.append(n)
        return out

    def sub(
        self,
        key: builtins.str,
        defaults: Mapping[builtins.str, Any] | None = None,
        aliases: Mapping[builtins.str, builtins.str] | None = None,
    ) -> Cfg:
        """A nested config object (vision_config, text_config); an absent one is all defaults."""
        value = self.raw.get(key)
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self.error("must be an object", key)
        return Cfg(value, defaults, source=self.source, path=f"{self.path}{key}.", used=self.used, aliases=aliases)

    def heads_divide(
        self, heads: builtins.int, kv_heads: builtins.int, key: builtins.str = "num_key_value_heads"
    ) -> None:
        if kv_heads <= 0 or heads % kv_heads:
            raise self.error(f"num_attention_heads {heads} is not a multiple of {key} {kv_heads}", key)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
