from verlib.version import compare, max_version, parse
