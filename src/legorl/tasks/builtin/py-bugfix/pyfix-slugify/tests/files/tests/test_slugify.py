from slugs import slugify, unique_slug

def test_plain():
    assert slugify("abc") == "abc"
    assert slugify("Python3") == "python3"

def test_unique():
    assert unique_slug("post", {"post", "post-2"}) == "post-3"


def test_punctuation():
    assert slugify("Hello, World!") == "hello-world"

def test_spaces():
    assert slugify("  a  b ") == "a-b"

def test_unique_with_punctuation():
    assert unique_slug("Hi!", {"hi"}) == "hi-2"
