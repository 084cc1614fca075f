from graphs.search import shortest_path
