"""A size-bounded parse cache shared by the line-oriented readers."""

from __future__ import annotations


class BoundedCache(dict):
    """A dict that forgets everything once its keys add up to `budget`
    characters: bounded memory, and a corpus's working set of stacks
    refills it within a few files. Outsized keys (junk) are not kept."""

    def __init__(self, budget: int):
        super().__init__()
        self.budget, self.used = budget, 0

    def put(self, key, value):
        if len(key) > self.budget >> 6:
            return value
        if self.used + len(key) > self.budget:
            self.clear()
            self.used = 0
        self[key] = value
        self.used += len(key)
        return value
