"""What one group read or made of a topic's messages, kept for the topic's other
groups, which deliver the same messages: the records (pzq.delivery.groups, with
``default``'s delivery counts zeroed, as every named group reads them), each read and
looked at once for all. (The batch entries of runs are taken from the runs kept whole:
pzq.serving.sending.)"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, islice
from typing import cast

from pzq.bulk import each
from pzq.delivery.first_runs import sizes_of

RECENT_RECORDS = 4096  # records kept for the other groups of a topic
RECENT_RECORD_BYTES = 4096  # a longer one is read from the store by each group


def remember(recent: dict[int, bytes], seqs: list[int], values: Sequence[bytes | None]) -> int:
    """The records read (None: not stored) kept for the topic's
    other groups, the oldest let go past RECENT_RECORDS; none longer than
    RECENT_RECORD_BYTES, so what is kept stays within RECENT_RECORDS times that
    (16 MiB) whatever the messages. Returns the longest record's length (0: none),
    measured here once for the caller too."""
    if all(values):  # (no None: a record is never empty)
        # measured as first_run measures them (the same list: taken there, not again)
        longest = max(sizes_of(cast(list[bytes], values)), default=0)
    else:
        stored = [value is not None for value in values]
        seqs, values = list(compress(seqs, stored)), list(compress(values, stored))
        longest = max(map(len, cast(list[bytes], values))) if values else 0
    if longest > RECENT_RECORD_BYTES:
        short = list(map(RECENT_RECORD_BYTES.__ge__, map(len, cast(list[bytes], values))))
        seqs, values = list(compress(seqs, short)), list(compress(values, short))
    recent.update(zip(seqs, cast(list[bytes], values), strict=True))
    over = len(recent) - RECENT_RECORDS
    if over > 0:
        each(recent.pop, list(islice(recent, over)))
    return longest
