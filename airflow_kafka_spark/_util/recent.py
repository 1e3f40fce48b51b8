"""A small, thread-safe memory of the last few results this process computed.

Why one helper: the HDFS blob index (``ops.backup.store``) and the parsed manifests (``ops.backup.reuse``)
each keep what a stop's pre-copy passes and the backup after it would otherwise compute again, from
threads (the passes run beside the stop's wait). Both need the same thing: a bounded mapping, the
oldest entry dropped first, every access under one lock.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The last ``size`` values put, by key; putting a key again makes it the newest."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items.pop(key, None)
            while len(self._items) >= self._size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = value
