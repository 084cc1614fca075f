from listkit.ops import chunks, dedupe, flatten
