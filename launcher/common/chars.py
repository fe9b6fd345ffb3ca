"""Which characters a value may hold, and how the others are shown.

One rule for every value that reaches an argv, an environment, a rendered file or a terminal (`unsafe_char`), and
its other half for text vlaunch did not choose (process titles, a lock file's fields): `escaped` writes each such
character as a visible escape, so a title holding ESC or a bidi override prints as `\\x1b]0;…` instead of acting.
"""

from __future__ import annotations

import unicodedata

# Characters no value that reaches an argv, an environment or a rendered file may hold: controls (C0, DEL, C1:
# \n \r \t \v \f \x1c-\x1f \x85 …), format characters (bidi overrides, zero-width), line and paragraph
# separators (U+2028, U+2029), surrogates. Each is a way for one value to read as several arguments or lines
# somewhere (a shell, systemd, YAML, a terminal); one rule for every field, no per-target list.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def is_unsafe(ch: str) -> bool:
    """Whether the character `ch` is one no value may hold (the classes above)."""
    # white space other than a plain space too: Python's str.split() / splitlines() cut at each of them
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES or (ch.isspace() and ch != " ")


def unsafe_char(text: str) -> str | None:
    """The first character `text` may not hold, as its code point and name (`U+2028 (LINE SEPARATOR)`); None
    when every character is allowed."""
    for ch in text:
        if is_unsafe(ch):
            name = unicodedata.name(ch, "a control character")
            return f"U+{ord(ch):04X} ({name})"
    return None


def escaped(text: object) -> str:
    """`text` with every character `unsafe_char` refuses written as `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN` (ESC,
    C1 controls, bidi overrides, U+2028, lone surrogates…): what a terminal shows as it is, never acts on."""
    out = []
    for ch in str(text):
        if not is_unsafe(ch):
            out.append(ch)
            continue
        code = ord(ch)
        out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
