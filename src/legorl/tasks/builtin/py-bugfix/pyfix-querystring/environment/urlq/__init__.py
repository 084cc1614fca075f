from urlq.parse import get_one, parse_query
