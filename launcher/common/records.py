"""`dataclass`, with frozen classes that share their methods instead of compiling their own.

For every `@dataclass(frozen=True)` the standard library compiles six methods from source text (__init__,
__repr__, __eq__, __hash__, __setattr__, __delattr__). A plan defines about a hundred such classes at import, and
that code generation was the largest single cost of a cold `vlaunch plan` (bench/cold_start.py). Here a frozen
class gets only its __init__ compiled; the other five are shared functions with the same behaviour:

- equality: same class and equal field values, in order (fields with compare=False left out);
- hash: of the compared fields' values (or of those with hash=True), as dataclasses gives frozen classes;
- repr: `Name(a=1, b='x')` over the fields with repr=True;
- frozen: assigning a field after __init__, any other attribute, or deleting one raises FrozenInstanceError
  (`object.__setattr__` still works, as in a frozen dataclass's __post_init__).

Type checkers see the standard decorator. Any option beyond frozen / kw_only / init / field defaults (order,
slots, unsafe_hash, eq=False, repr=False …) falls back to the standard library untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:

    def dataclass(cls: type | None = None, /, **options: Any) -> Any:
        """dataclasses.dataclass; frozen=True (with at most kw_only) takes the shared-method path."""
        fast = options.get("frozen") is True and set(options) <= {"frozen", "kw_only"}

        def wrap(c: type) -> type:
            if not fast:
                return dataclasses.dataclass(c, **options)
            return _frozen(c, kw_only=bool(options.get("kw_only", False)))

        return wrap if cls is None else wrap(cls)


_OWN = ("__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


def _frozen(cls: type, *, kw_only: bool) -> type:
    own = {name for name in _OWN if name in cls.__dict__}
    if cls.__dict__.get("__hash__", 0) is None:
        own.discard("__hash__")  # the None Python sets beside a class's own __eq__: frozen classes still hash
    cls = dataclasses.dataclass(cls, repr=False, eq=False, kw_only=kw_only)
    fields = dataclasses.fields(cls)
    names = frozenset(f.name for f in fields)
    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    shown = tuple(f.name for f in fields if f.repr)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in hashed))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{type(self).__qualname__}({inner})"

    def __setattr__(self: Any, name: str, value: object) -> None:
        d = self.__dict__
        if name in d or name not in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        d[name] = value  # __init__ setting the field the first time

    def __delattr__(self: Any, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    methods: dict[str, Callable[..., Any]] = {
        "__repr__": __repr__, "__eq__": __eq__, "__hash__": __hash__,
        "__setattr__": __setattr__, "__delattr__": __delattr__,
    }  # fmt: skip
    for name, fn in methods.items():
        if name not in own:
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, fn)
    return cls
