"""Whether a message at or past a seq is leaving (pzq.delivery.owed): an ACK's many
deletes are kept as their lists, and their highest seq as they come, so a delivery
pass's question is one compare, however many ACKs the batch holds."""

from __future__ import annotations

from pzq.delivery.owed import OwedWrites


def test_the_deletes_highest_answers_as_a_look_at_each_would():
    owed = OwedWrites(0)
    assert not owed.any_leaving_from(0)
    owed.delete_run([5, 6, 7], [1, 1, 1], ascending=True)
    assert owed.any_leaving_from(7) and not owed.any_leaving_from(8)
    owed.delete_run([20, 3, 9], [1, 1, 1])  # (not ascending: its highest looked for)
    assert owed.any_leaving_from(20) and not owed.any_leaving_from(21)
    owed.delete_run([], [])
    assert not owed.any_leaving_from(21)
    assert owed.leaving(3) and owed.leaving(20) and not owed.leaving(8)
    owed.written()  # the batch is written: nothing leaves any more
    assert not owed.any_leaving_from(0) and not owed.leaving(3)
    owed.delete_run([30, 31], [1, 1], ascending=True)
    owed.written()
    assert not owed.any_leaving_from(0)


def test_a_failed_batch_keeps_the_deletes_leaving():
    owed = OwedWrites(0)
    owed.delete_run([40, 41], [1, 1], ascending=True)
    owed.failed()  # kept for the next batch: still leaving, and nothing else kept
    assert owed.any_leaving_from(41) and owed.leaving(40)
    assert owed.unwritten_deletes == {40: 1, 41: 1}
    owed.unwritten_deletes.clear()
    assert not owed.any_leaving_from(0)
