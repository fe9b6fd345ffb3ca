"""Errors the library raises; only the CLI turns them into one line and an exit code."""

from __future__ import annotations


class VlaunchError(Exception):
    """Base class. `exit_code` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.message = message
        self.source = source
        self.field = field
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ": ".join(p for p in (self.source, self.field) if p)
        text = f"{where}: {self.message}" if where else self.message
        return " ".join(text.split())


class ConfigError(VlaunchError):
    """A model's config.json is missing, malformed or describes something we cannot count."""


class UnknownArchitectureError(ConfigError):
    """config.json names a model type this version does not know how to count."""


class FormatError(VlaunchError):
    """An unknown or inconsistent storage format."""


class CheckpointError(VlaunchError):
    """A safetensors or GGUF file could not be read."""


class ProfileError(VlaunchError):
    """A profile YAML is invalid."""


class DoesNotFit(VlaunchError):
    """The plan does not fit the machine."""

    exit_code = 3
