from slugs import slugify, unique_slug

def test_plain():
    assert slugify("abc") == "abc"
    assert slugify("Python3") == "python3"

def test_unique():
    assert unique_slug("post", {"post", "post-2"}) == "post-3"
