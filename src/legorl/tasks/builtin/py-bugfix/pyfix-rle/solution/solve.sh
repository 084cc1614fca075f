#!/bin/bash
# Oracle for pyfix-rle: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- rlecodec
cat > rlecodec/codec.py <<'LEGORL_EOF'
import re
from itertools import groupby


def encode(text: str) -> str:
    """'aaabcc' -> '3a1b2c'."""
    return "".join(f"{len(list(group))}{ch}" for ch, group in groupby(text))


def decode(data: str) -> str:
    return "".join(ch * int(count) for count, ch in re.findall(r"(\d+)(\D)", data))
LEGORL_EOF
