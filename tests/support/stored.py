"""Messages put straight into a real store, for tests of what reads and delivers them."""

from __future__ import annotations

from collections.abc import Sequence

from pzq.store import record
from pzq.store.store import Store


def stored(store: Store, count: int, size: int = 10,
           headers: Sequence[bytes] = ()) -> list[int]:
    """``count`` messages (bodies of ``size`` bytes, ``headers`` each) in one batch;
    their seqs."""
    batch = store.begin()
    seqs = [batch.add_message(record.encode(b"m%d" % i, tuple(headers), (b"x" * size,), 1))
            for i in range(count)]
    store.commit(batch)
    return seqs
