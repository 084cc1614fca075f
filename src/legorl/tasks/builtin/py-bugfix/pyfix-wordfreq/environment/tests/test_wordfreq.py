from textstats import top_words, word_counts, words

def test_punctuation():
    assert words("Hello, world!") == ["hello", "world"]

def test_top_words():
    assert top_words("b a b c b a", 2) == ["b", "a"]
