from collections import OrderedDict


class LRUCache:
    """Keeps at most `capacity` entries, evicting the least recently used."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._data = OrderedDict()

    def get(self, key, default=None):
        if key not in self._data:
            return default
        return self._data[key]

    def put(self, key, value):
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=True)

    def __contains__(self, key):
        return key in self._data

    def __len__(self):
        return len(self._data)
