"""What one group read of a topic's messages, kept for the topic's other groups, which
deliver the same messages: the records (pzq.delivery.groups, with ``default``'s
delivery counts zeroed, as every named group reads them) by the read
(``Topics.recent_reads``, pzq.store.kept_reads), each read and looked at once for all.
A read that is not a kept list takes what the kept reads hold of its seqs; nothing is
kept by seq (a dict of records, filled by each read and emptied by each ACK, cost some
1 000 instructions a message where no read asked it). (The batch entries of runs are
taken from the runs kept whole: pzq.serving.sending.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pzq.delivery.first_runs import sizes_of


def longest(values: Sequence[bytes | None]) -> int:
    """The longest of the records read (None: not stored; 0: none), for the bound on
    what is kept: measured as first_run measures them where each is stored (the same
    list: taken there, not again)."""
    if all(values):  # (no None: a record is never empty)
        return max(sizes_of(cast(list[bytes], values)), default=0)
    return max(map(len, filter(None, values)), default=0)
