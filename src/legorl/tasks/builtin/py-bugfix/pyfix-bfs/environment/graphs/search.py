from collections import deque


def shortest_path(graph: dict, start, goal) -> int:
    """Edges on a shortest path from start to goal, or -1 if goal is unreachable."""
    if start == goal:
        return 0
    queue = deque([(start, 0)])
    seen = {start}
    while queue:
        node, dist = queue.pop()
        for nxt in graph.get(node, []):
            if nxt == goal:
                return dist + 1
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, dist + 1))
    return -1
