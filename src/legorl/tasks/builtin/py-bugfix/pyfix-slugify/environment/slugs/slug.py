import re


def slugify(text: str) -> str:
    text = text.lower()
    return re.sub(r"[^a-z0-9]", "-", text)


def unique_slug(text: str, existing: set[str]) -> str:
    base = slugify(text)
    slug, n = base, 2
    while slug in existing:
        slug = f"{base}-{n}"
        n += 1
    return slug
