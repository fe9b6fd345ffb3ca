"""A pasted vLLM launch, read as a shell would run it, down to the `vllm serve` it starts.

`split` turns command text into words the way a POSIX shell does (quotes, backslashes, `~`, `$VAR`, `${VAR}`,
`$(pwd)`, and `&&` `;` `||` `|` as their own words). Variables are taken from the environment given; an unset
one is refused, naming it. `unwrap` peels what surrounds vLLM: `NAME=value` prefixes and `env`, `sudo`, `nohup`,
`docker run` / `podman run` (its options kept: mounts, -e, --gpus, --shm-size …), `docker exec CONTAINER`,
`bash -c '…'` scripts, the image whose entrypoint is `vllm serve` (vllm/vllm-openai), `python -m
vllm.entrypoints.openai.api_server`, and returns the words vLLM's parser reads with how the launch runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Literal

from launcher.common.errors import VlaunchError
from launcher.common.records import dataclass


class CommandError(VlaunchError):
    """A pasted command vlaunch cannot read as a vLLM launch."""


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ASSIGNMENT = re.compile(rf"^({_NAME})=(.*)$", re.S)
_VAR = re.compile(rf"\$(?:\{{({_NAME})(?:(:?[-=?+])([^}}]*))?\}}|({_NAME})|\(([^()]*)\)|(\d|[@*#?$!-]))")
OPERATORS = ("&&", "||", ";", "|", "&")


@dataclass(frozen=True)
class Word:
    """One shell word: as written (quotes removed, `$` kept where the shell would expand it) and its value."""

    raw: str  # the word with variables unexpanded: `HF_TOKEN=$HF_TOKEN`
    parts: tuple[tuple[str, bool], ...]  # (text, expands) pieces: single-quoted and escaped text does not
    operator: bool = False

    def text(self, env: Mapping[str, str]) -> str:
        """The word as the shell passes it on (variables from `env`; an unset one is refused)."""
        return "".join(expand(t, env) if live else t for t, live in self.parts)


def _subst(m: re.Match[str], env: Mapping[str, str]) -> str:
    name = m.group(1) or m.group(4)
    if m.group(5) is not None:
        if m.group(5).strip() == "pwd":
            return os.getcwd()
        raise CommandError(f"$({m.group(5)}): command substitution is not run; paste the command with it expanded")
    if m.group(6) is not None:
        raise CommandError(f"${m.group(6)}: a shell special parameter; paste the command with it expanded")
    op, default = m.group(2), m.group(3)
    value = env.get(name)
    if op in (":-", ":=") and not value:
        return default or ""
    if op in ("-", "=") and value is None:
        return default or ""
    if op in (":+", "+"):
        return (default or "") if value else ""
    if value is None:
        raise CommandError(f"${name} is not set: set it in the environment, or paste the command with its value")
    return value


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$VAR`, `${VAR}`, `${VAR:-default}` and `$(pwd)` in `text`, from `env`."""
    return _VAR.sub(lambda m: _subst(m, env), text)


def _tilde(word: str) -> str:
    if word == "~" or word.startswith("~/"):
        return os.path.expanduser("~") + word[1:]
    return word


class _Splitter:
    """A POSIX shell's word splitting over one text (no globbing, no here-docs)."""

    def __init__(self, text: str) -> None:
        self.text = text.replace("\\\n", "")  # line continuations
        self.i = 0
        self.words: list[Word] = []
        self.parts: list[tuple[str, bool]] = []
        self.raw: list[str] = []
        self.started = False

    def _add(self, text: str, live: bool) -> None:
        self.parts.append((text, live))
        self.raw.append(text)
        self.started = True

    def _end(self) -> None:
        if self.started:
            parts = self.parts
            if parts and parts[0][1] and parts[0][0].startswith("~"):  # an unquoted ~ at the word's start
                parts[0] = (_tilde(parts[0][0]), True)
            self.words.append(Word("".join(self.raw), tuple(parts)))
        self.parts, self.raw, self.started = [], [], False

    def _single(self) -> None:
        end = self.text.find("'", self.i + 1)
        if end < 0:
            raise CommandError("an unterminated ' quote in the command")
        self._add(self.text[self.i + 1 : end], False)
        self.i = end + 1

    def _double(self) -> None:
        j, buf = self.i + 1, list[str]()
        while j < len(self.text) and self.text[j] != '"':
            if self.text[j] == "\\" and j + 1 < len(self.text) and self.text[j + 1] in '"\\$`':
                if buf:
                    self._add("".join(buf), True)
                    buf = []
                self._add(self.text[j + 1], False)
                j += 2
                continue
            buf.append(self.text[j])
            j += 1
        if j >= len(self.text):
            raise CommandError('an unterminated " quote in the command')
        self._add("".join(buf), True)
        if not buf:
            self.started = True
        self.i = j + 1

    def run(self) -> list[Word]:
        t = self.text
        while self.i < len(t):
            c = t[self.i]
            if c in " \t\n":
                self._end()
                self.i += 1
            elif c == "'":
                self._single()
            elif c == '"':
                self._double()
            elif c == "\\" and self.i + 1 < len(t):
                self._add(t[self.i + 1], False)
                self.i += 2
            elif c == "#" and not self.started:
                nl = t.find("\n", self.i)
                self.i = len(t) if nl < 0 else nl
            elif c in "&|;":
                self._end()
                op = t[self.i : self.i + 2] if t[self.i : self.i + 2] in ("&&", "||") else c
                self.words.append(Word(op, ((op, False),), operator=True))
                self.i += len(op)
            else:
                j = self.i
                while j < len(t) and t[j] not in " \t\n'\"\\&|;":
                    if t.startswith("$(", j):  # a command substitution stays one piece
                        close = t.find(")", j)
                        j = len(t) if close < 0 else close + 1
                    else:
                        j += 1
                self._add(t[self.i : j], True)
                self.i = j
        self._end()
        return self.words


def split(text: str) -> list[Word]:
    """Shell words of `text` (variables left for `Word.text`)."""
    return _Splitter(text).run()


def given(words: Sequence[str]) -> list[Word]:
    """Words a shell already split (the argv after `vlaunch plan --`): their `$VAR` still expand."""
    out = []
    for w in words:
        if w in OPERATORS:
            out.append(Word(w, ((w, False),), operator=True))
        else:
            out.append(Word(w, ((_tilde(w), True),)))
    return out


# ---- the launch a command starts --------------------------------------------------------------------------------

Mode = Literal["cli", "module", "container"]


@dataclass(frozen=True)
class Launch:
    """How a pasted command starts vLLM, and the words vLLM's parser reads."""

    mode: Mode
    args: tuple[str, ...]  # after `vllm serve` (serve=True) or the API server module's arguments
    serve: bool = True
    executable: str | None = None  # the vllm console script when not plain `vllm`
    python: str | None = None  # module launch
    image: str | None = None
    container_name: str | None = None
    container_args: tuple[str, ...] = ()  # the container runtime's own options, kept as written
    entrypoint_serves: bool | None = None  # the image's entrypoint is `vllm serve`: args follow the image
    runtime: str = "docker"
    exec_container: str | None = None  # `docker exec CONTAINER …`: vLLM runs in a container already running
    env: tuple[tuple[str, str], ...] = ()  # variables set for vLLM (NAME=value prefixes, `-e NAME=value`)
    pass_env: tuple[str, ...] = ()  # variables passed by name from the caller's environment (`-e NAME`)
    notes: tuple[str, ...] = ()  # what the command did that vlaunch does not repeat


# `docker run` / `podman run` options that take a value (docker run --help, Docker 28); every other option is a
# switch. `podman run` takes the same spellings for these.
_RUN_VALUE = frozenset(
    (
        "-a", "--attach", "--add-host", "--annotation", "--blkio-weight", "--blkio-weight-device", "--cap-add",
        "--cap-drop", "--cgroup-parent", "--cgroupns", "--cidfile", "--cpu-period", "--cpu-quota",
        "--cpu-rt-period", "--cpu-rt-runtime", "-c", "--cpu-shares", "--cpus", "--cpuset-cpus", "--cpuset-mems",
        "--device", "--device-cgroup-rule", "--device-read-bps", "--device-read-iops", "--device-write-bps",
        "--device-write-iops", "--dns", "--dns-option", "--dns-search", "--domainname", "--entrypoint", "-e",
        "--env", "--env-file", "--expose", "--gpus", "--group-add", "--health-cmd", "--health-interval",
        "--health-retries", "--health-start-interval", "--health-start-period", "--health-timeout", "-h",
        "--hostname", "--ip", "--ip6", "--ipc", "--isolation", "--kernel-memory", "-l", "--label", "--label-file",
        "--link", "--link-local-ip", "--log-driver", "--log-opt", "--mac-address", "-m", "--memory",
        "--memory-reservation", "--memory-swap", "--memory-swappiness", "--mount", "--name", "--network", "--net",
        "--network-alias", "--oom-score-adj", "--pid", "--pids-limit", "--platform", "-p", "--publish", "--pull",
        "--restart", "--runtime", "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout",
        "--storage-opt", "--sysctl", "--tmpfs", "--ulimit", "-u", "--user", "--userns", "--uts", "-v", "--volume",
        "--volume-driver", "--volumes-from", "-w", "--workdir", "--device-requests", "--hooks-dir", "--secret",
        "--umask",
    )
)  # fmt: skip
_EXEC_VALUE = frozenset(("-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir", "--detach-keys"))
# Switches a supervised launch cannot repeat: vlaunch runs the container attached, without a terminal, removed
# on exit, and reads its log.
_ATTACHED = frozenset({"-i", "--interactive", "-t", "--tty", "-d", "--detach", "--rm"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_SUDO_VALUE = frozenset({"-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "--host", "-p", "--prompt"})
# The images whose entrypoint is `vllm serve`: what follows the image is the model and its flags.
_SERVE_ENTRYPOINT = re.compile(r"(?:^|/)vllm-openai(?:[-_][a-z0-9]+)*(?::|@|$)")
API_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")


def entrypoint_serves(image: str) -> bool:
    """Whether an image's own entrypoint starts `vllm serve` (vLLM's vllm/vllm-openai images) rather than a
    shell, as NVIDIA's nvcr.io/nvidia/vllm does (its entrypoint turns on CUDA forward compatibility)."""
    return bool(_SERVE_ENTRYPOINT.search(image))


def _one_command(ws: list[Word], notes: list[str], env: Mapping[str, str]) -> list[Word]:
    """The command of a list (`a && b; c`) that starts vLLM; the others are named in a note."""
    if not any(w.operator for w in ws):
        return ws
    segments: list[list[Word]] = [[]]
    for w in ws:
        if w.operator:
            segments.append([])
        else:
            segments[-1].append(w)
    found = [s for s in segments if _mentions_vllm(s)]
    if not found:
        raise CommandError("no `vllm serve` in the command")
    others = [" ".join(w.raw for w in s) for s in segments if s and s is not found[-1]]
    if others:
        notes.append("not repeated by vlaunch: " + "; ".join(f"`{o}`" for o in others))
    return found[-1]


def _mentions_vllm(ws: Sequence[Word]) -> bool:
    texts = [w.raw for w in ws]
    return (
        any(os.path.basename(t) == "vllm" for t in texts)
        or any(m in texts for m in API_MODULES)
        or any("vllm serve" in t or "vllm.entrypoints" in t for t in texts)
    )


def _text(w: Word, env: Mapping[str, str]) -> str:
    return w.text(env)


def _passed_through(raw: str) -> str | None:
    """`NAME=$NAME` (or `"${NAME}"`): the caller's own variable, passed on by name."""
    m = ASSIGNMENT.match(raw)
    if m and m.group(2) in (f"${m.group(1)}", f"${{{m.group(1)}}}"):
        return m.group(1)
    return None


def unwrap(ws: Sequence[Word], env: Mapping[str, str]) -> Launch:
    """The vLLM launch a pasted command starts."""
    notes: list[str] = []
    launch = _unwrap(list(ws), env, notes, 0)
    return _with_notes(launch, notes)


def _with_notes(launch: Launch, notes: list[str]) -> Launch:
    import dataclasses

    return dataclasses.replace(launch, notes=(*notes, *launch.notes)) if notes else launch


def _unwrap(ws: list[Word], env: Mapping[str, str], notes: list[str], depth: int) -> Launch:
    if depth > 8:
        raise CommandError("wrappers nested too deeply")
    ws = _one_command(ws, notes, env)
    assigns: list[tuple[str, str]] = []
    i = 0
    while i < len(ws):
        raw = ws[i].raw
        if ASSIGNMENT.match(raw):
            if _passed_through(raw) is None:
                m = ASSIGNMENT.match(_text(ws[i], env))
                assert m is not None
                assigns.append((m.group(1), m.group(2)))
            i += 1
            continue
        base = os.path.basename(_text(ws[i], env))
        if base in ("env", "nohup", "exec", "time", "command", "stdbuf"):
            i += 1
            while base == "env" and i < len(ws) and ws[i].raw.startswith("-"):
                i += 2 if ws[i].raw in ("-u", "--unset", "-C", "--chdir") else 1
            continue
        if base == "sudo":
            notes.append("sudo is not repeated: vlaunch starts the launch as the user running it")
            i += 1
            while i < len(ws) and ws[i].raw.startswith("-"):
                i += 2 if ws[i].raw in _SUDO_VALUE else 1
            continue
        if base in ("uv", "uvx", "pipx") and i + 1 < len(ws) and ws[i + 1].raw == "run":
            notes.append(f"`{base} run` is not repeated: vlaunch starts vLLM directly")
            i += 2
            continue
        break
    rest = ws[i:]
    if not rest:
        raise CommandError("no command to read: paste the `vllm serve …` you run")
    launch = _command(rest, env, notes, depth)
    if assigns and launch.mode != "container":
        launch = _with_env(launch, assigns)
    elif assigns:
        notes.append(
            "variables set for the container runtime itself are not repeated: " + ", ".join(k for k, _ in assigns)
        )
    return launch


def _with_env(launch: Launch, assigns: list[tuple[str, str]]) -> Launch:
    import dataclasses

    merged = dict(assigns)
    merged.update(dict(launch.env))
    return dataclasses.replace(launch, env=tuple(merged.items()))


def _command(ws: list[Word], env: Mapping[str, str], notes: list[str], depth: int) -> Launch:
    head = _text(ws[0], env)
    base = os.path.basename(head)
    second = ws[1].raw if len(ws) > 1 else ""
    if base in ("docker", "podman") and second == "run":
        return _container_run(ws[2:], env, notes, depth, base)
    if base in ("docker", "podman") and second == "exec":
        return _container_exec(ws[2:], env, notes, depth, base)
    if base in _SHELLS:
        return _unwrap(_script(ws[1:], env, base), env, notes, depth + 1)
    if base == "vllm" and second == "serve":
        return Launch("cli", tuple(_text(w, env) for w in ws[2:]), executable=None if head == "vllm" else head)
    if base.startswith("python") and second == "-m":
        module = ws[2].raw if len(ws) > 2 else ""
        if module not in API_MODULES:
            raise CommandError(f"python -m {module}: not vLLM's server module")
        args = [_text(w, env) for w in ws[3:]]
        if module == "vllm.entrypoints.cli.main":
            if args[:1] != ["serve"]:
                raise CommandError("python -m vllm.entrypoints.cli.main without `serve`")
            return Launch("module", tuple(args[1:]), python=head)
        return Launch("module", tuple(args), serve=False, python=head)
    at = next(
        (k for k in range(len(ws) - 1) if os.path.basename(ws[k].raw) == "vllm" and ws[k + 1].raw == "serve"), None
    )
    if at is not None:
        wrapper = " ".join(w.raw for w in ws[:at])
        notes.append(f"`{wrapper}` is not repeated: vlaunch starts `vllm serve` itself")
        return _command(ws[at:], env, notes, depth)
    raise CommandError(
        f"not a vLLM launch: {' '.join(w.raw for w in ws[:3])} … (expected `vllm serve MODEL …`, `python -m "
        "vllm.entrypoints.openai.api_server …`, `docker run … IMAGE [vllm serve] …` or a wrapper around one)"
    )


def _script(ws: list[Word], env: Mapping[str, str], shell: str) -> list[Word]:
    """`bash [-i] [-l] -c 'SCRIPT'` -> SCRIPT's words."""
    i = 0
    while i < len(ws) and ws[i].raw.startswith("-"):
        if "c" in ws[i].raw[1:] and not ws[i].raw.startswith("--"):
            j = i + 1
            while j < len(ws) and ws[j].raw.startswith("-"):  # `bash -c -i "…"`: more switches before the script
                j += 1
            if j >= len(ws):
                raise CommandError(f"{shell} -c without a script")
            return split(_text(ws[j], env))
        i += 1
    raise CommandError(f"{shell} without -c SCRIPT: not a vLLM launch")


@dataclass(frozen=True)
class _Opt:
    """One option of `docker run` / `docker exec`, and its value (None for a switch)."""

    name: str
    word: Word | None = None  # the word holding the value
    cut: int = 0  # characters of that word before the value (`--env=`, `-e`)

    def raw(self) -> str:
        return self.word.raw[self.cut :] if self.word else ""

    def text(self, env: Mapping[str, str]) -> str:
        return self.word.text(env)[self.cut :] if self.word else ""


def _options(ws: list[Word], value_opts: frozenset[str]) -> tuple[list[_Opt], int]:
    """The runtime's options up to its first operand (the image or container), and that operand's index."""
    out: list[_Opt] = []
    i = 0
    while i < len(ws):
        raw = ws[i].raw
        if raw == "--":
            return out, i + 1
        if not raw.startswith("-") or raw == "-":
            break
        if raw.startswith("--"):
            name, eq, _ = raw.partition("=")
            if name in value_opts and not eq:
                if i + 1 >= len(ws):
                    raise CommandError(f"{name} needs a value")
                out.append(_Opt(name, ws[i + 1]))
                i += 2
                continue
            out.append(_Opt(name, ws[i], len(name) + 1) if eq else _Opt(name))
            i += 1
            continue
        for j, letter in enumerate(raw[1:], start=1):  # -it, -e NAME, -eNAME, -v/a:/b
            name = "-" + letter
            if name not in value_opts:
                out.append(_Opt(name))
                continue
            if j + 1 < len(raw):
                out.append(_Opt(name, ws[i], j + 1 + (raw[j + 1] == "=")))
            elif i + 1 < len(ws):
                out.append(_Opt(name, ws[i + 1]))
                i += 1
            else:
                raise CommandError(f"{name} needs a value")
            break
        i += 1
    return out, i


@dataclass(frozen=True)
class _Kept:
    """What a container runtime's options become: kept as written, or read into the launch."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    pass_env: tuple[str, ...]
    name: str | None
    entrypoint: str | None


def _read_options(opts: list[_Opt], env: Mapping[str, str], notes: list[str]) -> _Kept:
    args: list[str] = []
    envs: list[tuple[str, str]] = []
    passed: list[str] = []
    name = entrypoint = None
    network = any(o.name in ("--network", "--net") for o in opts)
    dropped: list[str] = []
    for o in opts:
        if o.name in ("-e", "--env"):
            by_name = _passed_through(o.raw()) or (o.raw() if re.fullmatch(_NAME, o.raw()) else None)
            if by_name:
                passed.append(by_name)
            else:
                key, _, value = o.text(env).partition("=")
                envs.append((key, value))
        elif o.name == "--name":
            name = o.text(env)
        elif o.name == "--entrypoint":
            entrypoint = o.text(env)
        elif o.name in _ATTACHED:
            if o.name != "--rm":
                dropped.append(o.name)
        elif o.name in ("-p", "--publish", "-P", "--publish-all") and not network:
            shown = f"{o.name} {o.text(env)}".strip()
            notes.append(
                f"{shown} is not repeated: vlaunch runs the container on the host's network, where vLLM's --host and "
                "--port apply (--host 0.0.0.0 to reach it from other machines)"
            )
        else:
            args += [o.name] if o.word is None else [o.name, o.text(env)]
    if dropped:
        notes.append(
            " ".join(dict.fromkeys(dropped)) + " not repeated: vlaunch runs the container attached, without a "
            "terminal, and reads its log"
        )
    return _Kept(tuple(args), tuple(envs), tuple(dict.fromkeys(passed)), name, entrypoint)


def _container_run(ws: list[Word], env: Mapping[str, str], notes: list[str], depth: int, runtime: str) -> Launch:
    opts, at = _options(ws, _RUN_VALUE)
    if at >= len(ws):
        raise CommandError(f"{runtime} run without an image")
    kept = _read_options(opts, env, notes)
    image = _text(ws[at], env)
    after = ws[at + 1 :]
    if image == "vllm" and after and after[0].raw == "serve":  # `docker run … vllm serve M`: the image left out
        raise CommandError(f"{runtime} run names no image: put the image before `vllm serve` (vllm/vllm-openai:TAG)")
    if kept.entrypoint:
        if os.path.basename(kept.entrypoint) not in (*_SHELLS, "vllm") and not kept.entrypoint.startswith("python"):
            raise CommandError(f"--entrypoint {kept.entrypoint}: not a shell, vllm or python; vlaunch cannot read it")
        after = [Word(kept.entrypoint, ((kept.entrypoint, False),)), *after]
        notes.append(f"--entrypoint {kept.entrypoint} is not repeated: vlaunch runs the vLLM command in the image")
    base = dict(
        mode="container", image=image, container_name=kept.name, container_args=kept.args, runtime=runtime,
        env=kept.env, pass_env=kept.pass_env,
    )  # fmt: skip
    first = os.path.basename(after[0].raw) if after else ""
    if after and (first in (*_SHELLS, "vllm") or first.startswith("python") or _mentions_vllm(after)):
        inner = _unwrap(after, env, notes, depth + 1)
        if inner.mode == "container":
            raise CommandError("a container launch inside a container: paste the inner `vllm serve …`")
        base["env"] = (*kept.env, *inner.env)
        return Launch(args=inner.args, serve=inner.serve, entrypoint_serves=False, **base)  # type: ignore[arg-type]
    if not after and not entrypoint_serves(image):
        raise CommandError(f"{image} is given no command: paste the `vllm serve …` it runs")
    if not entrypoint_serves(image):
        notes.append(f"{image}'s entrypoint is taken to be `vllm serve` (the words after the image are vLLM's)")
    return Launch(args=tuple(_text(w, env) for w in after), entrypoint_serves=True, **base)  # type: ignore[arg-type]


def _container_exec(ws: list[Word], env: Mapping[str, str], notes: list[str], depth: int, runtime: str) -> Launch:
    opts, at = _options(ws, _EXEC_VALUE)
    if at + 1 >= len(ws):
        raise CommandError(f"{runtime} exec without a container and a command")
    kept = _read_options(opts, env, notes)
    container = _text(ws[at], env)
    inner = _unwrap(ws[at + 1 :], env, notes, depth + 1)
    if inner.mode == "container":
        raise CommandError("a container launch inside a container: paste the inner `vllm serve …`")
    return Launch(
        "container",
        inner.args,
        serve=inner.serve,
        exec_container=container,
        container_args=kept.args,
        runtime=runtime,
        env=(*kept.env, *inner.env),
        pass_env=kept.pass_env,
    )


def read(words: Sequence[str], env: Mapping[str, str]) -> Launch:
    """A pasted command: argv words (one word holding the whole command is split as a shell would)."""
    ws = split(words[0]) if len(words) == 1 and any(c in words[0] for c in " \t\n") else given(words)
    if not ws:
        raise CommandError("no command after --; paste the `vllm serve …` you run")
    return unwrap(ws, env)
