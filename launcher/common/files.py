"""Opening a file vlaunch was given: only a regular file, never a device, a FIFO or a socket that would block or
stream forever (`/dev/zero`, a named pipe), and small files read whole only up to a cap."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO

from launcher.common.errors import VlaunchError

MAX_SMALL_FILE = 64 * 2**20
"""config.json, a profile, a run record: anything larger is not one."""


def expand_user(path: str, error: type[VlaunchError] = VlaunchError) -> str:
    """`path` with a leading `~` or `~user` expanded; refused (one line) when there is no such user or home."""
    if "\0" in path:  # no file name holds one (the C library's string ends there); pwd and open raise on it
        raise error("a file name cannot hold a NUL byte", source=path.replace("\0", "\\x00"))
    if not path.startswith("~"):
        return path
    expanded = os.path.expanduser(path)
    if expanded.startswith("~"):
        user = path[1:].split("/", 1)[0]
        raise error(f"no such user {user!r}" if user else "no home directory to expand '~' to", source=path)
    return expanded


def open_regular(path: str | os.PathLike[str], error: type[VlaunchError] = VlaunchError) -> BinaryIO:
    """`path` opened for binary reading, refused (one line) unless it is a regular file."""
    shown = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused just below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error("no such file", source=shown) from None
    except IsADirectoryError:
        raise error("is a directory, not a file", source=shown) from None
    except OSError as e:
        raise error(f"cannot read: {e.strerror or e}", source=shown) from None
    except ValueError as e:  # a NUL byte in the name
        raise error(f"cannot read: {e}", source=shown) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise error(f"is {kind}, not a regular file", source=shown)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def write_atomic(path: str | os.PathLike[str], text: str, *, mode: int = 0o666) -> None:
    """Write `text` to `path` through a new file beside it and a rename: a reader sees the old file or the new one,
    never half of one, and a symlink at `path` is replaced, its target left alone. The new file gets `mode` (less
    the umask; 0o600 for a file only its owner may read). Raises OSError."""
    target = os.fspath(path)
    tmp = os.path.join(os.path.dirname(target) or ".", f".{os.path.basename(target)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:  # from here on the new file is ours: remove it on any failure (never a file that was there before)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_small(path: str | os.PathLike[str], error: type[VlaunchError] = VlaunchError) -> bytes:
    """The whole of a small regular file (a config, a profile, a record), refused past MAX_SMALL_FILE."""
    with open_regular(path, error) as fh:
        data = fh.read(MAX_SMALL_FILE + 1)
    if len(data) > MAX_SMALL_FILE:
        raise error(
            f"larger than {MAX_SMALL_FILE // 2**20} MiB: not a file vlaunch reads whole", source=os.fspath(path)
        )
    return data
