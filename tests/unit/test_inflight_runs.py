"""The in-flight table holds a run of first deliveries as one entry (pzq.delivery.
inflight): driven by random sends (runs, runs across a held one's span after a
rewind, deliveries sent alone), ACKs of whole runs, of stretches, of several runs
and of any keys in any order (some twice, some not held), NACKs and WORKINGs (a pop
and an add again), looks, expiry and eviction by the bytes bound, it answers each
step as a plain table of one InFlight a delivery in send order does."""

from __future__ import annotations

import random

import pytest

from pzq.delivery.inflight import InFlight, InFlightTable

TIMEOUT = 1_000


class Model:
    """One InFlight a delivery, in the order sent (each send later than the one
    before, so send order is deadline order)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: dict[int, InFlight] = {}

    @property
    def bytes(self) -> int:
        return sum(len(entry.value) for entry in self.entries.values())

    def add(self, entry: InFlight) -> list[InFlight]:
        self.entries[entry.seq] = entry
        evicted = []
        while self.bytes > self.max_bytes and len(self.entries) > 1:
            evicted.append(self.entries.pop(next(iter(self.entries))))
        return evicted

    def pop(self, seq: int) -> InFlight | None:
        return self.entries.pop(seq, None)

    def expire(self, now_us: int) -> list[InFlight]:
        expired = [entry for entry in self.entries.values() if entry.deadline_us <= now_us]
        for entry in expired:
            del self.entries[entry.seq]
        return expired


def record_of(seq: int, rng: random.Random) -> bytes:
    return b"%d:" % seq + b"r" * rng.randrange(0, 20)


class Driver:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.max_bytes = rng.choice([1 << 30, 400, 2000])
        self.table = InFlightTable(self.max_bytes)
        self.model = Model(self.max_bytes)
        self.now = 0
        self.next_seq = 0
        self.runs: list[list[int]] = []  # seqs of runs sent, for ACKs of their stretches

    def fresh(self, count: int) -> list[int]:
        seqs = sorted(self.rng.sample(range(self.next_seq, self.next_seq + 2 * count), count))
        self.next_seq += 2 * count
        return seqs

    def send_run(self) -> None:
        rng = self.rng
        if rng.random() < 0.2 and self.next_seq:  # a rewind's: seqs out no more, from below
            free = [seq for seq in range(self.next_seq) if seq not in self.model.entries]
            seqs = sorted(rng.sample(free, min(len(free), rng.randrange(1, 12))))
        else:
            seqs = self.fresh(rng.randrange(1, 30))
        if not seqs:
            return
        self.now += 1
        values = [record_of(seq, rng) for seq in seqs]
        size = sum(map(len, values))
        if self.table.bytes + size > self.max_bytes:
            return  # (a run is sent only within the bound)
        measured = list(map(len, values)) if rng.random() < 0.5 else None  # (a read's)
        self.table.add_run(seqs, values, self.now, self.now + TIMEOUT, size, measured)
        for seq, value in zip(seqs, values, strict=True):
            self.model.add(InFlight(seq, value, self.now, self.now + TIMEOUT, 1, self.now))
        self.runs.append(seqs)

    def send_alone(self) -> None:
        seq = self.fresh(1)[0]
        self.now += 1
        entry = InFlight(seq, record_of(seq, self.rng), self.now, self.now + TIMEOUT, 2, 1)
        copy = InFlight(entry.seq, entry.value, entry.sent_us, entry.deadline_us, 2, 1)
        assert self.table.add(entry) == self.model.add(copy)

    def ack_keys(self) -> list[int]:
        rng, held = self.rng, list(self.model.entries)
        shape = rng.randrange(5)
        if shape < 3 and self.runs:  # a run's seqs in the order sent: whole, a stretch, two
            at = rng.randrange(len(self.runs))
            seqs = [seq for run in self.runs[at:at + 1 + (shape == 2)] for seq in run]
            if shape == 1:
                start = rng.randrange(len(seqs))
                seqs = seqs[start:start + rng.randrange(1, len(seqs) + 1)]
            return seqs
        keys = rng.sample(held, min(len(held), rng.randrange(0, 8))) + \
            [rng.randrange(self.next_seq + 5) for _ in range(rng.randrange(3))]
        keys += rng.sample(keys, min(len(keys), rng.randrange(2)))  # some twice
        rng.shuffle(keys)
        return keys

    def ack(self) -> None:
        keys = self.ack_keys()
        taken = self.table.take_all(keys)
        popped = [(seq, self.model.pop(seq)) for seq in keys]
        assert taken.seqs == [seq for seq, entry in popped if entry is not None]
        assert taken.missing == [seq for seq, entry in popped if entry is None]
        assert taken.sizes == [len(entry.value) for _, entry in popped if entry is not None]
        assert taken.sent_us == [entry.sent_us for _, entry in popped if entry is not None]
        if taken.ascending:  # (then an ACK's masks are made without a look at each seq)
            assert not taken.missing and taken.seqs == sorted(set(taken.seqs))

    def nack_or_extend(self) -> None:
        seq = self.rng.choice([*self.model.entries, self.next_seq])
        entry = self.table.pop(seq)
        assert entry == self.model.pop(seq)
        if entry is not None and self.rng.random() < 0.5:  # WORKING: out again, at the end
            self.now += 1
            entry.deadline_us = self.now + TIMEOUT
            copy = InFlight(entry.seq, entry.value, entry.sent_us, entry.deadline_us,
                            entry.deliveries, entry.first_delivered_us)
            assert self.table.add(entry) == self.model.add(copy)

    def expire(self) -> None:
        self.now += self.rng.choice([1, TIMEOUT // 4, TIMEOUT // 2])
        assert self.table.expire(self.now) == self.model.expire(self.now)

    def look(self) -> None:
        table, model, rng = self.table, self.model, self.rng
        entries = list(model.entries.values())
        assert len(table) == len(entries) and table.bytes == model.bytes
        assert table.entries() == entries
        assert table.seqs() == [entry.seq for entry in entries]
        assert table.oldest() == (entries[0] if entries else None)
        assert table.lowest() == min(entries, key=lambda entry: entry.seq, default=None)
        asked = [rng.randrange(self.next_seq + 3) for _ in range(rng.randrange(1, 12))]
        assert table.among(asked) == {seq for seq in asked if seq in model.entries}
        assert [seq in table for seq in asked] == [seq in model.entries for seq in asked]
        assert table.get_all(asked) == [model.entries.get(seq) for seq in asked]
        if self.runs:
            run = rng.choice(self.runs)
            assert table.get_all(run) == [model.entries.get(seq) for seq in run]


@pytest.mark.parametrize("seed", range(150))
def test_the_run_entries_answer_as_one_entry_a_delivery(seed):
    rng = random.Random(seed)
    driver = Driver(rng)
    steps = [driver.send_run] * 4 + [driver.send_alone, driver.ack, driver.ack, driver.ack,
                                     driver.nack_or_extend, driver.expire]
    for _ in range(120):
        rng.choice(steps)()
        driver.look()
    driver.table.clear()
    assert len(driver.table) == 0 and driver.table.bytes == 0 and not driver.table.entries()


def test_a_stretch_taken_gives_the_runs_own_int_objects():
    """An ACK's seqs are ints of its own (equal, not the same objects): what a stretch
    took comes back as the run's, so later tables find them by identity."""
    table = InFlightTable(1 << 20)
    seqs = list(range(10**6, 10**6 + 50))
    table.add_run(seqs, [b"r"] * 50, 1, 2, 50)
    asked = [int(str(seq)) for seq in seqs[10:30]]
    assert all(seq is not mine for seq, mine in zip(asked, seqs[10:30], strict=True))
    taken = table.take_all(asked)
    assert taken.seqs == asked and all(
        seq is mine for seq, mine in zip(taken.seqs, seqs[10:30], strict=True))
    assert table.seqs() == seqs[:10] + seqs[30:] and table.bytes == 30


def test_an_ack_of_runs_in_their_order_is_known_ascending():
    """Stretches of runs taken in ascending order say so; a rewind's run below the
    one before it, a delivery held alone or a key not held do not."""
    table = InFlightTable(1 << 20)
    table.add_run(list(range(10, 20)), [b"r"] * 10, 1, 2, 10)
    table.add_run(list(range(20, 30)), [b"r"] * 10, 1, 2, 10)
    table.add_run(list(range(0, 5)), [b"r"] * 5, 1, 2, 5)  # a rewind's
    table.add(InFlight(40, b"r", 1, 2, 2, 1))
    assert table.take_all(list(range(15, 25))).ascending
    assert not table.take_all([*range(25, 30), *range(0, 3)]).ascending
    assert not table.take_all([3, 40]).ascending
    assert not table.take_all([4, 99]).ascending
    assert table.take_all(list(range(10, 15))).ascending


def test_a_run_holds_only_the_records_still_out():
    """A run whose deliveries are ACKed in part keeps only the records still out in
    memory, as its bytes count them (one left out does not keep the run's others)."""
    table = InFlightTable(1 << 20)
    values = [b"%03d" % seq for seq in range(10)]
    table.add_run(list(range(10)), values, 1, 2, 30)
    table.take_all([0, 1, 2, 3])
    assert table.pop(7) is not None
    assert table.take_all([4, 5, 6, 8]).sizes == [3, 3, 3, 3]
    assert [value for value in values if value] == [b"009"] and table.bytes == 3
    assert table.entries() == [InFlight(9, b"009", 1, 2, 1, 1)]
