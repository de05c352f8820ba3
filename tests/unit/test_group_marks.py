"""Group marks kept in memory over a real store: the same answers as the stored keys
give, across a reopen, past the number kept, after a failed batch, after the last
group's ACK or a seek back takes marks away, and after an operator's purge."""

from __future__ import annotations

import pytest

from pzq.admin.topic_walks import TopicWalks
from pzq.cluster.lone import NoCluster
from pzq.counters import Counters
from pzq.delivery.default_area import DefaultArea
from pzq.delivery.groups import GroupArea
from pzq.delivery.state import DeliveryState
from pzq.errors import StoreError
from pzq.serving.named_groups import NoConsumeEndpoint
from pzq.store import group_marks, keyspace, record
from pzq.store.store import Store
from pzq.store.topics import Topics
from tests.support.stored import FailNext
from tests.support.topic_store import SETTINGS, ack_all, deliver_all

pytestmark = pytest.mark.timeout(60)

GROUPS = ("billing", "audit", "search")


def open_node(path):
    store = Store.open(path)
    topics = Topics(store, "default")
    store.register(topics)
    failing = FailNext()
    store.register(failing)
    return store, topics, failing


def three_groups(store, topics, count):
    """``count`` messages of a topic three groups read, and each group's state."""
    orders = topics.topic("orders", 0)
    groups = [topics.add_group(orders, name, 0, "", 0) for name in GROUPS]
    batch = store.begin()
    for number in range(count):
        value = record.encode(b"id", (b"TOPIC:orders",), (b"m%d" % number,), 1)
        seq = batch.add_message(value)
        topics.note_new(batch, seq, orders, b"", len(value))
    store.commit(batch)
    states = []
    for group in groups:
        state = DeliveryState(GroupArea(store, topics, group), SETTINGS, Counters())
        store.register(state)
        states.append(state)
    return groups, states


def three_groups_read(store, topics, count):
    """``three_groups``, each group having read every message: the groups, their
    states and the messages' seqs."""
    groups, states = three_groups(store, topics, count)
    seqs = deliver_all(states[0])
    for state in states[1:]:
        deliver_all(state)
    return groups, states, seqs


def stored_marks(store, group_id):
    """The seqs the group's stored blocks of marks mark (none of them empty)."""
    marked = set()
    for key, value in store.iterate(keyspace.group_done_prefix(group_id)):
        assert value and value[-1], "a block is never empty, nor has trailing zero bytes"
        marked.update(keyspace.marked_seqs(keyspace.seq_at_end(key),
                                           int.from_bytes(value, "little")))
    return marked


def assert_answers_are_the_store_s(store, topics, groups, seqs):
    for group in groups:
        stored = stored_marks(store, group.id)
        assert {seq for seq in seqs if topics.is_done(group.id, seq)} == stored
        assert topics.done_among(group.id, seqs) == stored
    others = [group.id for group in groups[1:]]
    assert topics.marks.done_by_all(others, seqs) == [
        all(seq in stored_marks(store, group_id) for group_id in others) for seq in seqs]


@pytest.mark.parametrize("kept", [group_marks.MARKS_KEPT, 3])
def test_marks_answer_as_the_stored_keys_across_a_reopen(tmp_path, monkeypatch, kept):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)  # 3: some groups asked in the store
    store, topics, _ = open_node(tmp_path / "db")
    groups, states = three_groups(store, topics, 12)
    seqs = deliver_all(states[0])
    assert len(seqs) == 12 and deliver_all(states[1]) == seqs and deliver_all(states[2]) == seqs
    ack_all(store, states[0], seqs[:8])  # marks: billing 0-7
    ack_all(store, states[1], seqs[2:5] + seqs[9:])  # audit 2-4, 9-11
    ack_all(store, states[2], seqs[4:6] + seqs[10:11])  # search: 4 leaves, 5 and 10 marked
    assert store.messages == 11
    assert stored_marks(store, groups[0].id) == set(seqs[:8]) - {seqs[4]}
    assert stored_marks(store, groups[2].id) == {seqs[5], seqs[10]}
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()
    store, topics, _ = open_node(tmp_path / "db")  # read from the store again
    groups = [topics.topics["orders"].groups[name] for name in GROUPS]
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()


@pytest.mark.parametrize("kept", [group_marks.MARKS_KEPT, 100])
def test_runs_across_blocks_scattered_acks_and_releases_are_stored_as_marked(
        tmp_path, monkeypatch, kept):
    """Marks are stored in blocks of MARK_BLOCK seqs: runs that cross a block's end,
    ACKs of every seventh message, repeated seqs, and the last group's ACK clearing
    the others' bits (a block left empty goes) read back the same after a reopen."""
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)  # 100: asked in the blocks
    store, topics, _ = open_node(tmp_path / "db")
    count = 2 * keyspace.MARK_BLOCK + 200
    groups, states, seqs = three_groups_read(store, topics, count)
    edge = keyspace.MARK_BLOCK
    ack_all(store, states[0], seqs[edge - 50:edge + 50])  # a run across a block's end
    ack_all(store, states[0], seqs[::7])  # scattered, some acked already
    ack_all(store, states[1], seqs[edge - 60:edge + 40] + seqs[5:6] * 3)  # repeated
    ack_all(store, states[2], seqs[edge - 70:edge + 30])  # the last: those leave
    done = [set(seqs[edge - 50:edge + 50]) | set(seqs[::7]),
            set(seqs[edge - 60:edge + 40]) | {seqs[5]}, set(seqs[edge - 70:edge + 30])]
    left = done[0] & done[1] & done[2]
    assert store.messages == count - len(left)
    for group, marked in zip(groups, done, strict=True):
        assert stored_marks(store, group.id) == marked - left
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    batch = store.begin()  # marks far apart: a mask a block
    topics.marks.mark_all(batch, groups[1].id, [seqs[1], seqs[1] + group_marks.SPAN_AT_ONCE])
    topics.marks.unmark_all(batch, groups[1].id, [seqs[5], seqs[5] + 3 * keyspace.MARK_BLOCK])
    store.commit(batch)
    done[1] = (done[1] | {seqs[1], seqs[1] + group_marks.SPAN_AT_ONCE}) - {seqs[5]}
    assert stored_marks(store, groups[1].id) == done[1] - left
    asked = [*seqs, seqs[1] + group_marks.SPAN_AT_ONCE]
    assert_answers_are_the_store_s(store, topics, groups, asked)
    store.close()
    store, topics, _ = open_node(tmp_path / "db")  # read from the store again
    groups = [topics.topics["orders"].groups[name] for name in GROUPS]
    for group, marked in zip(groups, done, strict=True):
        assert {seq for seq in asked if topics.is_done(group.id, seq)} == marked - left
    assert_answers_are_the_store_s(store, topics, groups, asked)
    store.close()


@pytest.mark.parametrize("kept", [group_marks.MARKS_KEPT, 3])
def test_marks_of_a_failed_batch_are_not_taken_for_done(tmp_path, monkeypatch, kept):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", kept)
    store, topics, failing = open_node(tmp_path / "db")
    groups, states, seqs = three_groups_read(store, topics, 6)
    ack_all(store, states[1], seqs[:2])
    batch = store.begin()
    topics.marks.mark_all(batch, groups[0].id, seqs)
    topics.marks.unmark_all(batch, groups[1].id, seqs[:1])
    assert topics.is_done(groups[0].id, seqs[5]) and not topics.is_done(groups[1].id, seqs[0])
    failing.armed = True
    with pytest.raises(StoreError):
        store.commit(batch)
    assert not any(topics.is_done(groups[0].id, seq) for seq in seqs)
    assert topics.is_done(groups[1].id, seqs[0])
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()


def test_the_last_group_s_ack_and_a_seek_back_take_marks_away(tmp_path):
    store, topics, _ = open_node(tmp_path / "db")
    groups, states, seqs = three_groups_read(store, topics, 6)
    ack_all(store, states[0], seqs)
    ack_all(store, states[1], seqs)
    batch = store.begin()
    topics.not_done(batch, groups[0], seqs[5])  # billing is to read it again
    store.commit(batch)
    assert not topics.is_done(groups[0].id, seqs[5])
    ack_all(store, states[2], seqs)
    assert store.messages == 1  # the one billing reads again
    assert stored_marks(store, groups[0].id) == set()
    assert stored_marks(store, groups[1].id) == {seqs[5]}
    assert stored_marks(store, groups[2].id) == {seqs[5]}
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()


def test_marks_an_operator_s_purge_deleted_are_gone_from_memory(tmp_path):
    store, topics, _ = open_node(tmp_path / "db")
    groups, states, seqs = three_groups_read(store, topics, 6)
    ack_all(store, states[0], seqs)
    ack_all(store, states[1], seqs[:3])
    default = DeliveryState(DefaultArea(store, topics), SETTINGS, Counters())
    walks = TopicWalks(store, topics, NoConsumeEndpoint(), default, NoCluster(None))
    purged = set(seqs[1::2])
    assert walks.delete(topics.topics["orders"], lambda seq, _tag: seq in purged, 0.0) == 3
    assert not any(topics.is_done(groups[0].id, seq) for seq in purged)
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()


def test_a_group_with_too_many_marks_is_asked_in_the_store_until_it_has_few(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(group_marks, "MARKS_KEPT", 4)
    store, topics, _ = open_node(tmp_path / "db")
    groups, states, seqs = three_groups_read(store, topics, 16)
    billing = groups[0].id
    ack_all(store, states[0], seqs[:10])  # ten marks: asked in the store
    assert topics.is_done(billing, seqs[9]) and not topics.is_done(billing, seqs[10])
    assert topics.marks.kept() == 0
    ack_all(store, states[1], seqs[:9])
    ack_all(store, states[2], seqs[:9])  # billing's marks down to one: kept again
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    assert topics.marks.kept() == 1
    ack_all(store, states[0], seqs[10:])  # seven again: to the store, its highest sought anew
    assert topics.is_done(billing, seqs[15])
    assert topics.marks.kept() == 0
    assert_answers_are_the_store_s(store, topics, groups, seqs)
    store.close()


@pytest.mark.timeout(10)
def test_a_seq_alone_has_the_bit_a_run_of_it_and_its_neighbour_gives_it():
    for seq in (0, 1, 1023, 1024, 5000, 2**63 - 1):
        (first, mask), = group_marks.block_masks([seq])
        assert first == seq - seq % keyspace.MARK_BLOCK and mask == 1 << (seq % 1024)
        pair = dict(group_marks.block_masks([seq, seq - 1] if seq else [seq, seq + 1]))
        assert pair[first] & mask == mask
