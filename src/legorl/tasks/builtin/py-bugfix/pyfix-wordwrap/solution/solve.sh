#!/bin/bash
# Oracle for pyfix-wordwrap: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- wraptext
cat > wraptext/wrap.py <<'LEGORL_EOF'
def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap; a word longer than width gets its own line."""
    if width < 1:
        raise ValueError("width must be >= 1")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current += " " + word
    if current:
        lines.append(current)
    return lines


def fill(text: str, width: int) -> str:
    return "\n".join(wrap(text, width))
LEGORL_EOF
