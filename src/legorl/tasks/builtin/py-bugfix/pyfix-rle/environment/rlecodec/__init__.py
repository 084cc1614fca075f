from rlecodec.codec import decode, encode
