from rlecodec import decode, encode

def test_encode():
    assert encode("aaabcc") == "3a1b2c"
    assert encode("") == ""

def test_decode_short():
    assert decode("3a1b2c") == "aaabcc"


def test_decode_long_run():
    assert decode("12a1b") == "a" * 12 + "b"

def test_roundtrip():
    text = "x" * 15 + "yz" + "w" * 10
    assert decode(encode(text)) == text
