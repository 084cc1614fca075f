from collections import Counter

PUNCT = ".,!?;:\"'()"


def words(text: str) -> list[str]:
    """Lower-cased words of `text`, punctuation stripped."""
    return [w.strip(PUNCT) for w in text.lower().split(" ") if w.strip(PUNCT)]


def word_counts(text: str) -> dict[str, int]:
    return dict(Counter(words(text)))


def top_words(text: str, n: int) -> list[str]:
    return [w for w, _ in Counter(words(text)).most_common(n)]
