"""The result type every preflight check returns, and how a list of them is printed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

Level = Literal["PASS", "WARN", "FATAL", "SKIP"]

MARKS: dict[str, str] = {"PASS": "✓", "WARN": "⚠ WARN", "FATAL": "✗ FATAL", "SKIP": "⊘ SKIP"}


@dataclass(frozen=True)
class CheckResult:
    """One line of preflight output; `fix` says what to change when the level is WARN or FATAL."""

    check: str  # the check's short name (e.g. "tool-parser")
    level: Level
    message: str
    fix: str = ""

    def line(self) -> str:
        text = f"{MARKS[self.level]} [{self.check}] {self.message}"
        return f"{text} -> {self.fix}" if self.fix and self.level in ("WARN", "FATAL") else text


def ok(check: str, message: str) -> CheckResult:
    return CheckResult(check, "PASS", message)


def warn(check: str, message: str, fix: str = "") -> CheckResult:
    return CheckResult(check, "WARN", message, fix)


def fatal(check: str, message: str, fix: str = "") -> CheckResult:
    return CheckResult(check, "FATAL", message, fix)


def skip(check: str, message: str) -> CheckResult:
    return CheckResult(check, "SKIP", message)


def has_fatal(results: Iterable[CheckResult]) -> bool:
    return any(r.level == "FATAL" for r in results)


def format_results(results: Iterable[CheckResult]) -> list[str]:
    """One line per check plus a summary line (counts per level)."""
    results = list(results)
    lines = [r.line() for r in results]
    counts = {lvl: sum(1 for r in results if r.level == lvl) for lvl in MARKS}
    verdict = "refusing to start" if counts["FATAL"] else "ok to start"
    lines.append(
        f"preflight: {counts['PASS']} passed, {counts['WARN']} warnings, {counts['FATAL']} fatal, "
        f"{counts['SKIP']} skipped: {verdict}"
    )
    return lines


def print_results(results: Iterable[CheckResult], echo: Callable[[str], None] = print) -> bool:
    """Print every line; returns True when the run may start (no FATAL)."""
    results = list(results)
    for line in format_results(results):
        echo(line)
    return not has_fatal(results)
