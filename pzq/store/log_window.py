"""A topic's log read ahead once for all its groups: groups draining one topic at once
read the same entries, each at its own place, and seldom in the same wake, so each
walked the log itself. The window keeps the seqs and tags of the log's entries from
``base`` to ``end`` as one walk read them, and a group's read inside it is a slice
(found by bisection, cut in C). The group furthest on extends it as it reads; the
oldest entries go past KEPT_AT_MOST, and a group behind them (a slow one, or one
sought back) walks the log itself, as every group did before.

Nothing in the window may be missing from the log: a message that leaves the store
through pzq.store.topics cuts the window above it (its groups were all past it, or
they would not be done with it), and any other change of the log (an operator's
walk, a backfill) lets the window go. Entries written after the walk are past
``end``, so a read reaches them by extending the window. The window is memory only:
a restart starts without one.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter

from pzq.store import keyspace
from pzq.store.store import Store

READ_AHEAD = 1024  # log entries one walk reads, at least (more for a larger read)
WALK_AT_MOST = 4096  # and at most, as a group's own walk
KEPT_AT_MOST = 8192  # entries kept (about 70 B each)

KEY, VALUE = itemgetter(0), itemgetter(1)
LOG_SEQ = itemgetter(slice(len(keyspace.topic_log_prefix(0)), None))  # a log key: prefix, seq


class LogWindow:
    """The entries of one topic's log from ``base`` to ``end`` (both included; none
    while ``end`` < ``base``)."""

    def __init__(self, store: Store, topic_id: int) -> None:
        self.store = store
        self.topic_id = topic_id
        self.prefix = keyspace.topic_log_prefix(topic_id)
        self.seqs: list[int] = []
        self.tags: list[bytes] = []
        self.base = 0
        self.end = -1

    def read(self, first: int, newest: int, count: int) -> tuple[list[int], list[bytes], bool]:
        """The seqs and tags of up to ``count`` entries from ``first`` on, none past
        ``newest``; and whether they are the last up to ``newest`` (the read reached
        it)."""
        if first < self.base and self.end >= self.base:  # behind the window: its own walk
            seqs, tags = self._walk(first, newest, count)
            return seqs, tags, len(seqs) < count or (bool(seqs) and seqs[-1] >= newest)
        if first < self.base or first > self.end + 1:  # empty, or a group ahead of it
            self.seqs, self.tags, self.base, self.end = [], [], first, first - 1
        at = bisect_left(self.seqs, first)
        extend = len(self.seqs) - at < count and self.end < newest
        if extend:
            self._extend(newest, count)
        seqs, tags = self.seqs[at:at + count], self.tags[at:at + count]
        if extend and len(self.seqs) > KEPT_AT_MOST:  # the oldest go (after the slice)
            over = len(self.seqs) - KEPT_AT_MOST
            del self.seqs[:over], self.tags[:over]
            self.base = self.seqs[0]
        return seqs, tags, len(seqs) < count or seqs[-1] >= newest

    def _extend(self, newest: int, count: int) -> None:
        """The window read on from its end, up to ``newest``."""
        want = min(max(count, READ_AHEAD), WALK_AT_MOST)
        seqs, tags = self._walk(self.end + 1, newest, want)
        self.seqs += seqs
        self.tags += tags
        self.end = newest if len(seqs) < want or seqs[-1] >= newest else seqs[-1]

    def _walk(self, first: int, newest: int, count: int) -> tuple[list[int], list[bytes]]:
        """The seqs and tags of up to ``count`` log entries from ``first`` to ``newest``,
        taken from LevelDB in C."""
        pairs = self.store.read_up_to(self.prefix, keyspace.topic_log_key(self.topic_id, first),
                                      keyspace.topic_log_key(self.topic_id, newest), count)
        return list(map(int.from_bytes, map(LOG_SEQ, map(KEY, pairs)))), list(map(VALUE, pairs))

    def left(self, seqs: list[int]) -> None:
        """Messages left the store (their log entries deleted): the window keeps only
        what is above them."""
        if not seqs or self.end < self.base:
            return
        top = max(seqs)
        if top < self.base or min(seqs) > self.end:
            return
        if top >= self.end:
            self.seqs, self.tags, self.base, self.end = [], [], top + 1, top
            return
        at = bisect_right(self.seqs, top)
        del self.seqs[:at], self.tags[:at]
        self.base = top + 1

    def __len__(self) -> int:
        return len(self.seqs)


class LogWindows:
    """The windows of the topics read by more than one group, by topic id."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._windows: dict[int, LogWindow] = {}

    def of(self, topic_id: int) -> LogWindow:
        window = self._windows.get(topic_id)
        if window is None:
            window = self._windows[topic_id] = LogWindow(self.store, topic_id)
        return window

    def left(self, topic_id: int, seqs: list[int]) -> None:
        """Messages of the topic left the store (see LogWindow.left)."""
        window = self._windows.get(topic_id)
        if window is not None:
            window.left(seqs)

    def changed(self, topic_id: int) -> None:
        """The topic's log changed other than by messages leaving: its window goes."""
        self._windows.pop(topic_id, None)

    def kept(self) -> int:
        """Entries kept, of every topic."""
        return sum(map(len, self._windows.values()))

