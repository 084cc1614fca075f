from cachekit.lru import LRUCache
