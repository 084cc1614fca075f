#!/bin/bash
# Oracle for pyfix-slugify: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- slugs
cat > slugs/slug.py <<'LEGORL_EOF'
import re


def slugify(text: str) -> str:
    text = text.lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def unique_slug(text: str, existing: set[str]) -> str:
    base = slugify(text)
    slug, n = base, 2
    while slug in existing:
        slug = f"{base}-{n}"
        n += 1
    return slug
LEGORL_EOF
