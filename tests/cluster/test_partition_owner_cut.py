"""The owner of most partitions of a partitioned topic cut off, then SIGKILLed, while a
routing producer sends 24 keys and a routing group consumer drains the group
(tests/support/partition_owner.py). Asserts:
- nothing lost: every message ACKed "1" without REPLICATION_FAILED is consumed;
- the survivors' route tables give each of the victim's partitions to its successor
  (the next node in its ranking), and keys of those partitions sent after the kill
  are ACKed and consumed;
- each key's order: the sequence numbers of a key, in the order the consumer first
  saw each message (repeats ignored), increase, with one exception the cut allows.
  While cut off the victim keeps its partitions (it hears no majority) and the
  survivors take them too, so both sides accept the same keys: a message the victim
  took during the cut is delivered only by the victim, and may come after later
  messages of its key that the successor took. Nothing else may come out of order;
- duplicates within the bound of tests/cluster/test_partitions.py for two faults;
- no copy left on the survivors and no remove owed between them, no figure below 0.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.partition_keyed import first_seen, inversions
from tests.support.partition_load import PRODUCER_WINDOW
from tests.support.partition_owner import PREFETCH, OwnerPlan, OwnerRun, run_owner_scenario

pytestmark = [pytest.mark.partition, pytest.mark.slow]

NODES = 3
FAULTS = 2  # the cut, the kill
# in flight at each fault: every node's producer window and group window
DUPLICATE_BOUND = FAULTS * (NODES * PRODUCER_WINDOW + NODES * PREFETCH)


def figures(run: OwnerRun) -> dict[str, object]:
    tally = run.tally
    counts = Counter(body for _, body, _ in tally.deliveries)
    return {"victim": run.victim, "victim_partitions": run.victim_partitions,
            "sent": len(tally.sent_at), "acked_ok": len(tally.acked_ok),
            "acked_replication_failed": len(tally.acked_replication_failed),
            "refused": len(tally.refused), "consumed": len(counts),
            "lost": len(tally.acked_ok - set(counts)),
            "lost_replication_failed": len(tally.acked_replication_failed - set(counts)),
            "delivered_more_than_once": sum(1 for n in counts.values() if n > 1),
            "moved_after_s": run.moved_after_s, "followed_after_s": run.followed_after_s,
            "producer": run.producer, "timeline": run.timeline}


def cut_side_inversion(run: OwnerRun, inversion: str) -> bool:
    """The message first seen late went to the victim after the cut began."""
    body = inversion.split()[0].encode()
    victim = {endpoint for endpoint, node in run.receive.items() if node == run.victim}
    return any(endpoint in victim and when >= run.cut_at
               for when, endpoint in run.tally.sent_to.get(body, []))


@pytest.mark.timeout(120)
def test_an_owner_cut_off_then_killed_hands_its_partitions_to_their_successors(tmp_path: Path):
    run = run_owner_scenario(tmp_path, OwnerPlan())
    found = figures(run)
    print(found)
    where = f"(node logs in {tmp_path / 'logs'}; figures {found})"
    tally = run.tally
    assert not run.errors, where
    assert run.drained and found["acked_ok"], where
    assert found["lost"] == 0, where
    assert found["acked_replication_failed"], f"the cut did not strike {where}"

    for survivor, owners in run.owners_after_kill.items():
        for partition in run.victim_partitions:
            assert owners[partition] == run.successors[partition], (survivor, owners, where)
    consumed = tally.consumed()
    served = {run.key_partition(body) for body, at in tally.sent_at.items()
              if at > run.killed_at and body in tally.acked_ok and body in consumed}
    keyed = {run.key_partition(b"k%02d:0" % key) for key in range(24)}
    assert set(run.victim_partitions) & keyed <= served, where

    late = inversions(first_seen(tally.deliveries))
    unexplained = [one for one in late if not cut_side_inversion(run, one)]
    assert not unexplained, f"out of order: {unexplained} {where}"
    assert found["delivered_more_than_once"] <= DUPLICATE_BOUND, where

    assert run.settled, f"copies left {run.settled_stats} {where}"
    assert not run.negatives, where
