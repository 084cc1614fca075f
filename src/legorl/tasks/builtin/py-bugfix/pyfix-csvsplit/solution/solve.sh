#!/bin/bash
# Oracle for pyfix-csvsplit: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- rowparse
cat > rowparse/split.py <<'LEGORL_EOF'
def split_line(line: str, sep: str = ",") -> list[str]:
    """Fields of one delimited line, whitespace-stripped."""
    fields, buf, quoted, i = [], [], False, 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"' and line[i + 1:i + 2] == '"':
                buf.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                buf.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == sep:
            fields.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        i += 1
    fields.append("".join(buf).strip())
    return fields


def parse_rows(text: str, sep: str = ",") -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = split_line(lines[0], sep)
    return [dict(zip(header, split_line(ln, sep))) for ln in lines[1:]]
LEGORL_EOF
