"""The Dockerfile subset the local backend can honour without building an image.

Supported: FROM (one stage, mapped onto the host root: see `map_from`), WORKDIR, ENV, ARG (expanded as
Docker does: `legorl.env.dockerwords`), SHELL, USER (RUN lines after it run as that user in root
builds), COPY/ADD of local files (ADD also unpacks local tar archives), RUN (also `RUN <<EOF`
heredocs), VOLUME (its directory is created writable), ENTRYPOINT/CMD (recorded; started in the
background when the sandbox starts: `legorl.env.entrypoint`).
Ignored with a note: EXPOSE, LABEL, MAINTAINER, HEALTHCHECK (Harbor's is in task.toml), STOPSIGNAL.
Rejected with file and line: multi-stage builds, COPY --from, remote ADD, RUN --mount, ONBUILD, a
FROM image that is not Debian/Ubuntu/python based.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from legorl.env.base import SandboxError
from legorl.env.dockerwords import ExpandError, expand_vars, expand_word, expand_words

log = logging.getLogger(__name__)

SUPPORTED = {"FROM", "WORKDIR", "ENV", "ARG", "COPY", "ADD", "RUN", "VOLUME", "USER", "SHELL", "CMD", "ENTRYPOINT"}
IGNORED = {"EXPOSE", "LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL"}
REJECTED = {
    "ONBUILD": "ONBUILD is not supported",
}
# Base images whose userland the host root (Debian 12, its Python 3) approximates. The tag is not
# honoured: `python:3.13` gets the host's Python. Anything else is refused rather than guessed.
_MAPPABLE = re.compile(r"(^|[/_-])(debian|ubuntu|python|buildpack-deps)([:@/_-]|$)|(^|/)ubuntu-\d", re.I)


_WARNED: set[str] = set()


def map_from(image: str) -> str:
    """The note that says how the local backend stands in for `image`; ValueError when it cannot."""
    name = image.split("@")[0]
    if name.lower() == "scratch" or not _MAPPABLE.search(name.rsplit("/", 1)[-1] if "/" in name else name):
        raise ValueError(
            f"FROM {image} cannot be mapped onto the host root: the local backend maps Debian, Ubuntu and "
            "python images only (the host's userland stands in). Base the task on one of those, or run it "
            "with backend='docker'")
    return f"FROM {image} approximated by the host root (its Debian userland and Python, not the image's)"


class DockerfileError(SandboxError):
    """A Dockerfile line the local backend cannot honour; names the file and line."""

    def __init__(self, path: Path, lineno: int, line: str, why: str) -> None:
        super().__init__(
            f"{path}:{lineno}: {why}: {line.strip()!r} (use backend='docker' for full Dockerfiles)"
        )
        self.path, self.lineno, self.why = path, lineno, why


@dataclass
class Instruction:
    lineno: int
    keyword: str
    args: str
    flags: dict[str, str] = field(default_factory=dict)
    raw: str = ""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Joins backslash continuations, drops comments and blank lines; keeps the first line number."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    lines = text.splitlines()
    heredoc: tuple[str, bool, list[str]] | None = None  # (delimiter, strip tabs, body so far)
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if heredoc is not None:  # RUN <<EOF ... EOF: the body is kept verbatim
            delim, strip_tabs, body = heredoc
            if (line.lstrip("\t") if strip_tabs else line) == delim:
                out[-1] = (out[-1][0], out[-1][1] + "\n" + "\n".join(body) + "\n" + _HEREDOC_END + delim)
                heredoc = None
            else:
                body.append(line.lstrip("\t") if strip_tabs else line)
            continue
        m = _HEREDOC.search(line) if not buf and stripped.upper().startswith("RUN") else None
        if m:
            out.append((i, stripped))
            heredoc = (m.group(2), bool(m.group(1)), [])
            continue
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as docker does
        if not buf:
            start = i
        if line.rstrip().endswith("\\"):
            buf.append(line.rstrip()[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(s.strip() for s in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(s.strip() for s in buf)))
    return out


_HEREDOC = re.compile(r"<<(-?)[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?")
_HEREDOC_END = "\x00"  # marks the terminator line inside a logical line


def _split_flags(args: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    while args.startswith("--"):
        tok, _, rest = args.partition(" ")
        k, _, v = tok[2:].partition("=")
        flags[k] = v
        args = rest.lstrip()
    return flags, args


def parse(path: Path) -> list[Instruction]:
    """Parses and validates; raises DockerfileError at the first line the local backend cannot honour."""
    text = path.read_text()
    out: list[Instruction] = []
    seen_from = False
    for lineno, line in _logical_lines(text):
        kw, _, args = line.strip().partition(" ")
        kw = kw.upper()
        args = args.strip()
        flags, args = _split_flags(args)
        ins = Instruction(lineno, kw, args, flags, line)
        if kw in REJECTED:
            raise DockerfileError(path, lineno, line, REJECTED[kw])
        if kw in IGNORED:
            log.info("%s:%d: %s ignored by the local backend", path, lineno, kw)
            continue
        if kw not in SUPPORTED:
            raise DockerfileError(path, lineno, line, f"unknown or unsupported instruction {kw}")
        if kw == "FROM":
            if seen_from or re.search(r"\s+AS\s+", args, re.IGNORECASE):
                raise DockerfileError(path, lineno, line, "multi-stage builds are not supported")
            seen_from = True
            try:
                note = map_from(args.split()[0] if args else "")
                if note not in _WARNED:  # once per image per process: a task set shares a few images
                    _WARNED.add(note)
                    log.warning("%s:%d: %s (said once per image)", path, lineno, note)
            except ValueError as e:
                raise DockerfileError(path, lineno, line, str(e)) from None
            out.append(ins)
            continue
        if kw in ("COPY", "ADD") and "from" in flags:
            raise DockerfileError(path, lineno, line, "COPY --from (multi-stage) is not supported")
        if kw == "ADD" and re.match(r"^\S*(https?|git)[:@]", args):
            raise DockerfileError(
                path, lineno, line, "ADD of a remote URL is not supported (no network at build)"
            )
        if kw == "RUN" and "mount" in flags:
            raise DockerfileError(path, lineno, line, "RUN --mount is not supported")
        out.append(ins)
    return out


def words(ins: Instruction, path: Path) -> list[str]:
    """Arguments of COPY/ADD/VOLUME: JSON exec form or whitespace-separated words."""
    if ins.args.startswith("["):
        try:
            val = json.loads(ins.args)
        except json.JSONDecodeError as e:
            raise DockerfileError(path, ins.lineno, ins.raw, f"bad JSON array: {e}") from e
        return [str(v) for v in val]
    return shlex.split(ins.args)


def run_command(ins: Instruction) -> str:
    """A RUN line as a shell string (the exec form is quoted back into one; a heredoc `RUN <<EOF`
    is its body, `RUN cmd <<EOF` the command with its here-document)."""
    if "\n" in ins.args:
        first, _, rest = ins.args.partition("\n")
        body, _, delim = rest.rpartition("\n" + _HEREDOC_END)
        if re.fullmatch(r"<<-?[\"']?\w+[\"']?", first.strip()):
            return body
        return f"{first}\n{body}\n{delim}"
    if ins.args.startswith("["):
        try:
            return shlex.join(str(v) for v in json.loads(ins.args))
        except json.JSONDecodeError:
            pass
    return ins.args


def shell_form(ins: Instruction, path: Path) -> list[str]:
    """SHELL ["executable", "params"...]: the argv every later RUN line is appended to."""
    try:
        val = json.loads(ins.args)
    except json.JSONDecodeError:
        val = None
    if not isinstance(val, list) or not val or not all(isinstance(v, str) for v in val):
        raise DockerfileError(path, ins.lineno, ins.raw, 'SHELL needs a JSON array like ["/bin/bash", "-c"]')
    return val


def env_pairs(ins: Instruction, path: Path, env: dict[str, str] | None = None) -> list[tuple[str, str | None]]:
    """ENV/ARG as Docker reads them: `K=V K2="v 2"` or the legacy `K value with spaces`, values expanded
    against `env` (the variables before this line: Docker expands every pair of one ENV with the values
    it had before the line). An ARG without a value is declared but unset (None)."""
    args = ins.args
    if not args.strip():
        raise DockerfileError(path, ins.lineno, ins.raw, f"{ins.keyword} needs a name")
    try:
        if "=" not in args.split(None, 1)[0]:
            k, _, v = args.partition(" ")
            if not v.strip():
                if ins.keyword == "ENV":
                    raise DockerfileError(path, ins.lineno, ins.raw, "ENV needs a value")
                return [(k, None)]
            return [(k, expand_word(v, env))]
        out: list[tuple[str, str | None]] = []
        for tok in expand_words(args, env):
            k, sep, v = tok.partition("=")
            if not sep and ins.keyword == "ENV":
                raise DockerfileError(path, ins.lineno, ins.raw, f"ENV item {tok!r} has no '='")
            out.append((k, v if sep else None))
        return out
    except ExpandError as e:
        raise DockerfileError(path, ins.lineno, ins.raw, str(e)) from None


def substitute(text: str, env: dict[str, str]) -> str:
    """$VAR, ${VAR}, ${VAR:-default}, ${VAR:+alt} as docker expands them in WORKDIR/COPY/USER/VOLUME."""
    try:
        return expand_vars(text, env)
    except ExpandError:
        return text


def command_form(ins: Instruction, shell: list[str]) -> list[str]:
    """ENTRYPOINT/CMD as an argv: the exec form's JSON array, or the shell form under SHELL."""
    if ins.args.startswith("["):
        try:
            val = json.loads(ins.args)
            if isinstance(val, list) and all(isinstance(v, str) for v in val):
                return val
        except json.JSONDecodeError:
            pass  # docker runs a malformed array as shell form too
    return [*shell, ins.args] if ins.args else []
