"""Secrets kept out of what vlaunch shows and stores: printed commands, `--json`, run records, the box lock, run logs.

A secret is the value of an environment variable whose name says so (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, any
`*_TOKEN`, `*API_KEY`, `*SECRET*`, `*PASSWORD*`), given as a profile's `vllm.env`, as `NAME=value` or `-e NAME=value`
in a command; or the value of a vLLM option whose name says so (`--api-key K1 K2`, `--hf-token T`,
`--ssl-keyfile-password P`, `--x=value`). Shown, each becomes MASK; the process vlaunch starts still gets the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

MASK = "***"

_SECRET_NAME = re.compile(r"(?:^|_)(?:TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY)$|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_FREE_TEXT_MIN = 6
"""A secret this long or longer is also masked where it appears inside other text (a log line, a script)."""


def secret_name(name: str) -> bool:
    """An environment variable (or a vLLM option's dest) that holds a secret, by its name."""
    return bool(_SECRET_NAME.search(name))


def secret_option(word: str) -> bool:
    """`--api-key`, `--hf_token`, `--ssl-keyfile-password=…`: an option whose value is a secret."""
    if not word.startswith("--"):
        return False
    return secret_name(word[2:].split("=", 1)[0].replace("-", "_"))


def _assigned(word: str) -> tuple[str, str] | None:
    """(name, value) of a `NAME=value` word whose name is a secret's (`--env=NAME=value` too)."""
    for text in (word, word.split("=", 1)[1] if word.startswith("--") and "=" in word else ""):
        m = _ASSIGN.fullmatch(text)
        if m and secret_name(m[1]):
            return m[1], m[2]
    return None


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The secret values an argument list carries (see the module's docstring for which)."""
    out: list[str] = []
    taking = False  # after a secret option: its values, up to the next option (argparse reads nargs greedily)
    for word in argv:
        if taking and not (word.startswith("-") and len(word) > 1):
            out.append(word)
            continue
        taking = False
        if secret_option(word):
            if "=" in word:
                out.append(word.split("=", 1)[1])
            else:
                taking = True
        elif (pair := _assigned(word)) is not None:
            out.append(pair[1])
    return [s for s in out if s and s != MASK]


def env_secrets(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[str]:
    """The values of the secret-named variables among `env`."""
    items = env.items() if isinstance(env, Mapping) else env
    return [v for k, v in items if secret_name(k) and v and v != MASK]


class Masker:
    """Replaces known secret values: whole words, the value of `NAME=value`, and (when long enough) inside text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and s != MASK}, key=len, reverse=True)
        self._long = [s for s in self.secrets if len(s) >= _FREE_TEXT_MIN]
        self._long_bytes = [s.encode("utf-8", errors="surrogateescape") for s in self._long]

    @classmethod
    def of(cls, argv: Sequence[str], env: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> Masker:
        return cls([*argv_secrets(argv), *env_secrets(env)])

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        for s in self._long:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def line(self, raw: bytes) -> bytes:
        """A line of output with every long-enough secret masked."""
        for s in self._long_bytes:
            if s in raw:
                raw = raw.replace(s, MASK.encode())
        return raw

    def word(self, word: str) -> str:
        if word in self.secrets:
            return MASK
        for i, c in enumerate(word):
            if c == "=" and word[i + 1 :] in self.secrets:
                return word[: i + 1] + MASK
        return self.text(word)

    def argv(self, argv: Sequence[str]) -> list[str]:
        return [self.word(w) for w in argv]

    def env(self, env: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
        items = env.items() if isinstance(env, Mapping) else env
        return {k: MASK if secret_name(k) and v else self.text(v) for k, v in items}


def argv(words: Sequence[str], env: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> list[str]:
    """`words` as shown: every secret value masked."""
    return Masker.of(words, env).argv(words)
