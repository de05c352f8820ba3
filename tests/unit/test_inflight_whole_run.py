"""An ACK of exactly one run held whole, every delivery of it out and named in its
order (a consumer's ``ack_many`` of a BATCH that was the run), is taken with the run's
own lists (no slice of them made); any other ACK takes the stretches' way, with the
same answers."""

from __future__ import annotations

import pytest

from pzq.delivery.inflight import InFlightTable, Taken

pytestmark = pytest.mark.timeout(30)


def table_with_run(first: int, count: int) -> tuple[InFlightTable, list[int], list[int]]:
    """A table holding one run of ``count`` from ``first``, sent at 7 µs; its seqs and
    its records' sizes, as the table keeps them."""
    table = InFlightTable(1 << 30)
    seqs = list(range(first, first + count))
    values = [b"r" * (1 + seq % 5) for seq in seqs]
    sizes = [len(value) for value in values]
    table.add_run(seqs, values, 7, 1_007, sum(sizes), sizes)
    return table, seqs, sizes


@pytest.mark.parametrize("same_list", [True, False])
def test_a_whole_run_is_taken_with_its_own_lists(same_list: bool) -> None:
    table, seqs, sizes = table_with_run(10, 100)
    asked = seqs if same_list else [int(str(seq)) for seq in seqs]  # (other int objects)
    taken = table.take_all(asked)
    assert taken == Taken(seqs, sizes, [7] * 100, [], True)
    assert taken.seqs is seqs and taken.sizes is sizes  # (copies before)
    assert len(table) == 0 and table.bytes == 0
    assert 50 not in table and table.pop(50) is None
    again = table.take_all(asked)  # ACKed twice: nothing held
    assert again.seqs == [] and again.missing == seqs


@pytest.mark.parametrize("case", ["part", "one given back", "reordered", "one more",
                                  "another first", "two runs"])
def test_any_other_ack_takes_the_stretches_way(case: str) -> None:
    table, seqs, sizes = table_with_run(10, 8)
    if case == "part":
        asked, held = seqs[:5], seqs[5:]
    elif case == "one given back":
        assert table.pop(13) is not None
        asked, held = seqs, []
    elif case == "reordered":
        asked, held = [*seqs[4:], *seqs[:4]], []
    elif case == "one more":
        asked, held = [*seqs, 99], []
    elif case == "another first":
        asked, held = seqs[1:], seqs[:1]
    else:
        table.add_run([20, 21], [b"a", b"b"], 8, 1_008, 2, [1, 1])
        asked, held = [*seqs, 20, 21], []
    taken = table.take_all(asked)
    assert taken.seqs is not seqs
    expected = [seq for seq in asked if seq in seqs or seq in (20, 21)]
    if case == "one given back":
        expected.remove(13)
    assert taken.seqs == expected
    assert taken.missing == [seq for seq in asked if seq not in expected]
    assert sorted(seq for seq in [*seqs, 20, 21] if seq in table) == held
