from rlecodec import decode, encode

def test_encode():
    assert encode("aaabcc") == "3a1b2c"
    assert encode("") == ""

def test_decode_short():
    assert decode("3a1b2c") == "aaabcc"
