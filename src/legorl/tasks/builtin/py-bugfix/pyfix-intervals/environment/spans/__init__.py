from spans.merge import merge, total_length
