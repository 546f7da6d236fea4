"""Golden-model twin of :mod:`lbpipe.hdl.lib.ring`: one ring buffer with head, tail and count."""

__all__ = ["Ring"]


class Ring:
    """A ring of ``depth`` entries. ``push`` drops the oldest entry of a full ring when ``overwrite`` (the default)
    and refuses the push otherwise; entries are indexed from the oldest (``ring[0]``)."""

    def __init__(self, depth, fill=0):
        self.depth = depth
        self.slots = [fill] * depth
        self.head = 0
        self.tail = 0
        self.count = 0

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self.slots[(self.head + i) % self.depth]

    def push(self, value, *, overwrite=True):
        """Write ``value`` at the tail; returns False when a full ring refused it."""
        full = self.count == self.depth
        if full and not overwrite:
            return False
        self.slots[self.tail] = value
        self.tail = (self.tail + 1) % self.depth
        if full:
            self.head = (self.head + 1) % self.depth
        else:
            self.count += 1
        return True

    def drop(self, n):
        """Drop the ``n`` oldest entries."""
        if not 0 <= n <= self.count:
            raise ValueError(f"cannot drop {n} of {self.count} entries")
        self.head = (self.head + n) % self.depth
        self.count -= n
