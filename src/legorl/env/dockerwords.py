"""Docker's word rules for ENV/ARG/WORKDIR/COPY: quotes, backslash escapes and `$VAR` expansion.

Docker (BuildKit's shell lexer) expands variables while it reads quotes, so the two cannot be done one
after the other: `ENV A='$B'` is the literal `$B`, `ENV A="$B c"` one word with B expanded. Forms
expanded: `$VAR`, `${VAR}`, `${VAR:-word}` (unset or empty -> word), `${VAR-word}` (unset -> word),
`${VAR:+word}` (set and non-empty -> word), `${VAR+word}` (set -> word), `${VAR:?msg}`/`${VAR?msg}`
(an error naming msg). An unset variable is empty. `word` is expanded in turn.

Expansion sees the build's variables: ARG values, earlier ENV values, and PATH as the base image
would have it (`BASE_ENV`): `ENV PATH="/opt/x/bin:${PATH}"` keeps /usr/bin, as in Docker, where
every Debian/Ubuntu/python base image sets PATH.
"""

from __future__ import annotations

import re

from legorl.env.bwrap import BASE_PATH

BASE_ENV = {"PATH": BASE_PATH}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExpandError(ValueError):
    """`${VAR:?message}` with VAR unset, or an unterminated `${` / quote."""


class _Lexer:
    def __init__(self, text: str, env: dict[str, str | None]) -> None:
        self.s, self.i, self.env = text, 0, env

    def _peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def dollar(self) -> str:
        """After a `$`: the expansion of what follows (a lone `$` stays literal)."""
        if self._peek() == "{":
            return self._braced()
        m = _NAME.match(self.s, self.i)
        if not m:
            return "$"
        self.i = m.end()
        return self.env.get(m.group()) or ""

    def _braced(self) -> str:
        self.i += 1  # the `{`
        m = _NAME.match(self.s, self.i)
        if not m:
            raise ExpandError(f"bad substitution near {self.s[self.i - 2:self.i + 10]!r}")
        name, self.i = m.group(), m.end()
        val = self.env.get(name)
        if self._peek() == "}":
            self.i += 1
            return val or ""
        colon = self._peek() == ":"
        op = self._peek(1 if colon else 0)
        if op not in ("-", "+", "?"):
            raise ExpandError(f"unsupported modifier in ${{{name}{self.s[self.i:self.i + 3]}...}}")
        self.i += 2 if colon else 1
        word = self._until_brace()
        is_set = val is not None and (val != "" or not colon)
        if op == "-":
            return val or "" if is_set else word
        if op == "+":
            return word if is_set else ""
        if not is_set:
            raise ExpandError(f"{name}: {word or 'parameter not set'}")
        return val or ""

    def _until_brace(self) -> str:
        """The modifier's word up to the matching `}`, itself expanded (quotes kept out)."""
        out: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == "}":
                return "".join(out)
            if c == "\\" and self.i < len(self.s):
                out.append(self.s[self.i])
                self.i += 1
            elif c == "$":
                out.append(self.dollar())
            else:
                out.append(c)
        raise ExpandError("unterminated ${")

    def words(self, split: bool) -> list[str]:
        """The text as words (split on unquoted whitespace when `split`), quotes removed."""
        words: list[str] = []
        cur: list[str] = []
        started = False
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c.isspace() and split:
                if started:
                    words.append("".join(cur))
                    cur, started = [], False
                continue
            started = True
            if c == "\\":
                if self.i < len(self.s):
                    cur.append(self.s[self.i])
                    self.i += 1
            elif c == "'":
                end = self.s.find("'", self.i)
                if end < 0:
                    raise ExpandError("unterminated single quote")
                cur.append(self.s[self.i:end])
                self.i = end + 1
            elif c == '"':
                cur.append(self._double())
            elif c == "$":
                cur.append(self.dollar())
            else:
                cur.append(c)
        if started:
            words.append("".join(cur))
        return words

    def _double(self) -> str:
        out: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            self.i += 1
            if c == '"':
                return "".join(out)
            if c == "\\" and self._peek() in ('"', "\\", "$"):
                out.append(self.s[self.i])
                self.i += 1
            elif c == "$":
                out.append(self.dollar())
            else:
                out.append(c)
        raise ExpandError("unterminated double quote")


def _env(env: dict[str, str] | None) -> dict[str, str | None]:
    return {**BASE_ENV, **(env or {})}


def expand_words(text: str, env: dict[str, str] | None = None) -> list[str]:
    """`text` split into words the way Docker reads `ENV a=1 b="x y"`: quotes removed, `$` expanded."""
    return _Lexer(text, _env(env)).words(split=True)


def expand_word(text: str, env: dict[str, str] | None = None) -> str:
    """`text` as one word (the legacy `ENV K value with spaces`): quotes removed, `$` expanded."""
    return "".join(_Lexer(text.strip(), _env(env)).words(split=False))


def expand_vars(text: str, env: dict[str, str] | None = None) -> str:
    """Only the `$` expansions of `text`; quotes and backslashes stay (WORKDIR, USER, COPY words)."""
    lx = _Lexer(text, _env(env))
    out: list[str] = []
    while lx.i < len(text):
        c = text[lx.i]
        lx.i += 1
        if c == "\\" and lx._peek() == "$":
            out.append("$")
            lx.i += 1
        elif c == "$":
            out.append(lx.dollar())
        else:
            out.append(c)
    return "".join(out)
