"""Python's cyclic garbage collector, set once for a node's process at start-up.

A node allocates few objects that outlive a wake (bench_peers' workloads made one
to five young collections in 20 000 messages), but one with much in flight (120 000
deliveries held, say) ran some 190 collections, its full ones 53 to 69 ms of CPU
each: they walk what start-up made (some 39 000 objects: modules, configuration)
and every table the node holds. So, once the node is built:

- ``gc.freeze()`` moves everything start-up left into the permanent generation,
  which no later collection walks;
- gen0's threshold goes from 700 to ``GEN0_THRESHOLD`` tracked objects: some 30
  times fewer young collections, and the older generations' collections, full
  ones included, as much more rarely.

Collection stays on: cyclic garbage is freed at the latest after ``GEN0_THRESHOLD``
more tracked objects are made (a few MB at most held), not left to grow. Only a
node that owns its process does this (pzq.node.main); a node inside a test process
leaves that process's collector alone.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

GEN0_THRESHOLD = 20_000  # tracked objects made between two young collections (700)


@dataclass(frozen=True)
class CollectorSetting:
    """What the collector runs with: thresholds of its three generations, and how
    many objects start-up left out of every collection."""

    thresholds: tuple[int, int, int]
    frozen: int


def tune() -> CollectorSetting:
    """Collect start-up's garbage, freeze what is left, raise gen0's threshold; call
    once, when the node is built and before it serves."""
    gc.collect()  # garbage of start-up is freed, not frozen for the process's life
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
    return setting()


def setting() -> CollectorSetting:
    gen0, gen1, gen2 = gc.get_threshold()
    return CollectorSetting((gen0, gen1, gen2), gc.get_freeze_count())
