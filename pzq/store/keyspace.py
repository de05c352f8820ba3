"""The LevelDB key layout and the device's message keys, in one place.

Store keys are a one-byte prefix and a big-endian sequence number, so LevelDB
keeps each area in arrival order and a cursor walks new messages without a scan.

    m <seq:8>            this node's own messages
    r <node:8> <seq:8>   replicas held for another node (cluster)
    t <node:8> <seq:8>   tombstones: another node's messages acked here while it was down
    s <node:8>           who reads another node's topics: the group default and the named
                         groups (JSON, as that node sent it in TOPICS; cluster)
    l <node:8>           the seqs another node lost in a restore from a backup, as it sent
                         them in RESTORED (16-byte ranges), kept while a copy in them is
                         held here (pzq.cluster.kept_lost; cluster)
    R <node:8> <seq:8> <group>
                         a group done with a replica that other groups still hold (cluster)
    d <seq:8>            dead letters
    o <id:8>             removes owed to a peer until it confirms them (cluster)
    O <id:8>             DONE frames (a group done with messages) owed to a peer until it
                         confirms them (cluster)
    M <name>             metadata: node id, sequence high-water mark, counters, the
                         store's format version (see pzq.store.store_format)
    T <topic>            a topic: JSON settings (id, limits, whether default reads it,
                         where its log starts)
    j <topic:4> <block:8> <tag>
                         a topic's log, kept once it has a named group: its own messages of
                         one TAG in blocks of MARK_BLOCK seqs, the key's seq the block's
                         first, the value a bitmap of the block as the marks' (see
                         pzq.store.log_blocks; format 5)
    i <topic:4> <seq:8>  the same log as stores before format 5 kept it: an entry a
                         message, value its TAG (their upgrade reads it)
    G <topic:4> <group>  a consumer group of a topic: JSON settings (id, start seq, filter)
    n <id:4>             counts that move with the batches: a topic's stored messages and
                         bytes, a group's backlog and floor
    a <group:4> <seq:8>  messages a group is done with (acked, dead or filtered) that
                         other groups still hold (see pzq.store.topics), in blocks of
                         MARK_BLOCK seqs: the key's seq is the block's first, the value a
                         bitmap of the block, bit i for seq first + i, little-endian, no
                         trailing zero bytes (format 4; before, a key per seq, value empty)
    D <group:4>          how far a group's first deliveries went (its cursor, written with
                         the batches): a message below it was delivered at least once
    c <group:4> <seq:8>  a named group's delivery count of a message it delivered more than
                         once (first delivered µs, deliveries); ``default``'s is in the record
    W <group:4> <seq:8>  a delivery given back to go again later (a NACK's DELAY:, a group's
                         backoff), while it waits: the due µs (8 bytes; pzq.delivery.waits;
                         format 6)
    u <topic:4> <id>     a producer's DEDUP-ID seen in a topic: when (µs) and the seq stored
    U <µs:8> <topic:4> <id>
                         the same, in the order they expire (see pzq.store.dedup)
    w <len:1> <topic> <due µs:8> <seq:8>
                         a scheduled message (DELAY:, NOT-BEFORE:) before its due time: its
                         record, per topic in due-time order (pzq.store.scheduled; format 2).
                         Its letter sorts above every area a wake writes (``D`` to ``u``):
                         LevelDB compacts a wake's new files only with the files their key
                         range overlaps, so a backlog of scheduled messages inside that
                         range was rewritten again and again (produce at a third of its
                         rate beside 1 000 000 of them under ``S``)
    Z <topic>            how many scheduled messages a topic has waiting (format 2)
    v <seq:8>            a scheduled message's ``w`` key, by its seq: a peer that released it
                         in a takeover names the seq alone (format 3)
    x <node:8> <due µs:8> <seq:8>
                         another node's scheduled message held here as a copy until its
                         origin releases it: holders and record, in due-time order
                         (pzq.store.scheduled_copies; format 3)
    y <node:8> <seq:8>   that copy's due µs, by its seq: a remove names the seq alone
    X <expires µs:8> <seq:8>
                         an own message's expiry (TTL:, EXPIRES:), in time order (see
                         pzq.delivery.expiry; format 2)
    E <seq:8>            why a dead letter is one, when it is not its deliveries (expired)
    L <topic:4> <9-priority:1> <seq:8>
                         a message of a topic with priorities, PRIORITY 1 to 9: the lanes
                         its groups serve before their backlog (pzq.delivery.lanes; format 2)
    p <replay:8> <seq:8> a replay's messages read back from the archive, one group's only
    P <replay:8>         a replay's record: its group, range, position in the archive and
                         counts (JSON; see pzq.delivery.replay_area)

``<node:8>`` is the other node's id, 8 ASCII hex characters (``<replay:8>`` a replay's
id, of the same form: its messages' keys name it in the node id's place), and ``<seq:8>`` a
sequence number, as in the message key (see pzq.protocol.message_keys). ``<topic:4>`` and
``<group:4>`` are big-endian ids the node gives topics and groups when they are made
(group 0 is ``default``, the consumers on --send-dsn).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from itertools import compress, repeat
from operator import itemgetter

from pzq.bulk import CUT_AT_ONCE, cut
from pzq.protocol.message_keys import NODE_ID_LENGTH as NODE_ID_LENGTH
from pzq.protocol.message_keys import SEQ as SEQ

OWN_PREFIX = b"m"
OWN_KEY_SIZE = len(OWN_PREFIX) + SEQ.size
REPLICA_PREFIX = b"r"
TOMBSTONE_PREFIX = b"t"
READS_PREFIX = b"s"
LOST_PREFIX = b"l"
DEAD_PREFIX = b"d"
OWED_PREFIX = b"o"
OWED_DONE_PREFIX = b"O"
REPLICA_DONE_PREFIX = b"R"
META_PREFIX = b"M"
TOPIC_PREFIX = b"T"
TOPIC_LOG_PREFIX = b"i"  # before format 5
LOG_BLOCK_PREFIX = b"j"
GROUP_PREFIX = b"G"
GROUP_DONE_PREFIX = b"a"
COUNTS_PREFIX = b"n"
DELIVERED_PREFIX = b"D"
GROUP_COUNT_PREFIX = b"c"
WAIT_PREFIX = b"W"
DEDUP_PREFIX = b"u"
DEDUP_AGE_PREFIX = b"U"
SCHEDULED_PREFIX = b"w"
SCHEDULED_COUNT_PREFIX = b"Z"
SCHEDULED_SEQ_PREFIX = b"v"
SCHEDULED_COPY_PREFIX = b"x"
SCHEDULED_COPY_SEQ_PREFIX = b"y"
EXPIRY_PREFIX = b"X"
DEAD_REASON_PREFIX = b"E"
LANE_PREFIX = b"L"
REPLAY_PREFIX = b"p"  # a replay's messages: p <replay id> <seq>
REPLAY_RECORD_PREFIX = b"P"  # a replay's record: P <replay id>

META_NODE_ID = META_PREFIX + b"node_id"
META_NEXT_SEQ = META_PREFIX + b"next_seq"
META_COUNTERS = META_PREFIX + b"counters"
META_NEXT_ID = META_PREFIX + b"next_id"  # the next topic or group id
META_FORMAT = META_PREFIX + b"format"  # the store's format version, ASCII digits

ID = struct.Struct(">I")  # topic and group ids
FIRST, SECOND = itemgetter(0), itemgetter(1)


def own_key(seq: int) -> bytes:
    return OWN_PREFIX + SEQ.pack(seq)


def own_keys_of_run(seqs: range) -> Sequence[bytes]:
    """``own_key`` of each seq of a run (``seqs`` a range of step 1): the keys of the
    seqs that share all but their last byte are that head joined around those last
    bytes (single bytes, which Python keeps made), one join a 256 seqs; the keys cut
    apart by one struct unpack: no object a key but the key, no int packed a key."""
    start, stop, count = seqs.start, seqs.stop, len(seqs)
    low = start & 0xFF
    if 0 < count <= 256 - low:  # (a batch's run, mostly: one head)
        head = OWN_PREFIX + SEQ.pack(start)[:-1]
        return cut(head + head.join(_LAST_BYTES[low:low + count]), OWN_KEY_SIZE, count)
    pieces = []
    while start < stop:
        end = min(stop, (start | 0xFF) + 1)
        head = OWN_PREFIX + SEQ.pack(start)[:-1]
        pieces.append(head + head.join(_LAST_BYTES[start & 0xFF:((end - 1) & 0xFF) + 1]))
        start = end
    return cut(b"".join(pieces), OWN_KEY_SIZE, count)


def own_keys(seqs: Sequence[int]) -> Sequence[bytes]:
    """``own_key`` of each seq (many deletes at once: an ACK's), made by one struct pack
    of up to CUT_AT_ONCE of them (the prefix and the seq of each, put in place in one
    list), cut into keys: no object a key but the key (``own_keys_of_run`` for a run)."""
    if len(seqs) > CUT_AT_ONCE:
        keys: list[bytes] = []
        for start in range(0, len(seqs), CUT_AT_ONCE):
            keys += own_keys(seqs[start:start + CUT_AT_ONCE])
        return keys
    count = len(seqs)
    fields: list[bytes | int] = [OWN_PREFIX] * (2 * count)
    fields[1::2] = seqs
    return cut(_own_run(count).pack(*fields), OWN_KEY_SIZE, count)


@lru_cache(maxsize=CUT_AT_ONCE)
def _own_run(count: int) -> struct.Struct:
    return struct.Struct(">" + f"{len(OWN_PREFIX)}sQ" * count)


_LAST_BYTES = [bytes((value,)) for value in range(256)]  # a seq's last byte, each


def own_seq(store_key: bytes) -> int:
    seq: int = SEQ.unpack_from(store_key, len(OWN_PREFIX))[0]
    return seq


def own_messages(pairs: list[tuple[bytes, bytes]]) -> list[tuple[int, bytes]]:
    """(seq, record) of each own message's (key, record), the seqs read in C."""
    seqs = map(FIRST, map(SEQ.unpack_from, map(FIRST, pairs), repeat(len(OWN_PREFIX))))
    return list(zip(seqs, map(SECOND, pairs), strict=True))


def replay_prefix(replay_id: bytes) -> bytes:
    return REPLAY_PREFIX + replay_id


def replay_key(replay_id: bytes, seq: int) -> bytes:
    return REPLAY_PREFIX + replay_id + SEQ.pack(seq)


def replay_record_key(replay_id: bytes) -> bytes:
    return REPLAY_RECORD_PREFIX + replay_id


def dead_key(seq: int) -> bytes:
    return DEAD_PREFIX + SEQ.pack(seq)


def replica_prefix(origin: bytes) -> bytes:
    return REPLICA_PREFIX + origin


def replica_key(origin: bytes, seq: int) -> bytes:
    return REPLICA_PREFIX + origin + SEQ.pack(seq)


def tombstone_prefix(origin: bytes) -> bytes:
    return TOMBSTONE_PREFIX + origin


def tombstone_key(origin: bytes, seq: int) -> bytes:
    return TOMBSTONE_PREFIX + origin + SEQ.pack(seq)


def reads_key(origin: bytes) -> bytes:
    return READS_PREFIX + origin


def lost_key(origin: bytes) -> bytes:
    return LOST_PREFIX + origin


def owed_key(remove_id: int) -> bytes:
    return OWED_PREFIX + SEQ.pack(remove_id)


def owed_done_key(done_id: int) -> bytes:
    return OWED_DONE_PREFIX + SEQ.pack(done_id)


def replica_done_prefix(origin: bytes, seq: int) -> bytes:
    return REPLICA_DONE_PREFIX + origin + SEQ.pack(seq)


def replica_done_key(origin: bytes, seq: int, group: str) -> bytes:
    return REPLICA_DONE_PREFIX + origin + SEQ.pack(seq) + group.encode()


def split_node_key(store_key: bytes) -> tuple[bytes, int]:
    """(node id, seq) of a replica or tombstone key."""
    return store_key[1:1 + NODE_ID_LENGTH], SEQ.unpack_from(store_key, 1 + NODE_ID_LENGTH)[0]


def prefix_end(prefix: bytes) -> bytes:
    """The first key past every key that starts with ``prefix``. Trailing 0xff bytes
    cannot be counted up (a seq or an id ending in 255): the byte before them is.
    Every prefix starts with an area's letter, so one is always left."""
    counted = prefix.rstrip(b"\xff")
    return counted[:-1] + bytes([counted[-1] + 1])


def topic_key(name: bytes) -> bytes:
    return TOPIC_PREFIX + name


def counts_key(owner_id: int) -> bytes:
    return COUNTS_PREFIX + ID.pack(owner_id)


def topic_log_key(topic_id: int, seq: int) -> bytes:
    """A log entry of one seq as stores before format 5 kept it (their upgrade reads them)."""
    return TOPIC_LOG_PREFIX + ID.pack(topic_id) + SEQ.pack(seq)


def log_block_prefix(topic_id: int) -> bytes:
    return LOG_BLOCK_PREFIX + ID.pack(topic_id)


def encode_bits(bits: int) -> bytes:
    """A block's bitmap as stored (a group's marks, a topic's log): little-endian, no
    byte past its highest bit."""
    return bits.to_bytes((bits.bit_length() + 7) // 8, "little")


def log_block_key(topic_id: int, first: int, tag: bytes) -> bytes:
    """The key of the topic's block of messages of ``tag`` from ``first`` (a multiple of
    MARK_BLOCK)."""
    return LOG_BLOCK_PREFIX + ID.pack(topic_id) + SEQ.pack(first) + tag


def split_log_block_key(store_key: bytes) -> tuple[int, int, bytes]:
    """(topic id, block's first seq, tag) of a ``j`` key."""
    return (ID.unpack_from(store_key, 1)[0], SEQ.unpack_from(store_key, 1 + ID.size)[0],
            store_key[1 + ID.size + SEQ.size:])


def group_key(topic_id: int, name: bytes) -> bytes:
    return GROUP_PREFIX + ID.pack(topic_id) + name


def group_done_prefix(group_id: int) -> bytes:
    return GROUP_DONE_PREFIX + ID.pack(group_id)


def group_done_key(group_id: int, seq: int) -> bytes:
    """A mark of one seq as stores before format 4 kept it (their upgrade reads them)."""
    return GROUP_DONE_PREFIX + ID.pack(group_id) + SEQ.pack(seq)


MARK_BLOCK = 1024  # seqs a block of marks covers (a bitmap of at most 128 bytes)
MARK_BLOCK_OF = ~(MARK_BLOCK - 1)  # a seq's block's first seq: seq & MARK_BLOCK_OF


def mark_block_key(group_id: int, first: int) -> bytes:
    """The key of the block of marks from ``first`` (a multiple of MARK_BLOCK)."""
    return GROUP_DONE_PREFIX + ID.pack(group_id) + SEQ.pack(first)


BIT_DIGITS = bytes.maketrans(b"01", b"\x00\x01")  # a bitmap's digits as bytes 0 and 1


def marked_seqs(first: int, bits: int) -> list[int]:
    """The seqs a block's bitmap marks, ascending, picked in C (no call a bit)."""
    digits = bin(bits)[:1:-1].encode().translate(BIT_DIGITS)  # bit 0 first
    return list(compress(range(first, first + len(digits)), digits))


def delivered_key(group_id: int) -> bytes:
    return DELIVERED_PREFIX + ID.pack(group_id)


def group_count_prefix(group_id: int) -> bytes:
    return GROUP_COUNT_PREFIX + ID.pack(group_id)


def group_count_key(group_id: int, seq: int) -> bytes:
    return GROUP_COUNT_PREFIX + ID.pack(group_id) + SEQ.pack(seq)


def wait_prefix(group_id: int) -> bytes:
    return WAIT_PREFIX + ID.pack(group_id)


def wait_key(group_id: int, seq: int) -> bytes:
    return WAIT_PREFIX + ID.pack(group_id) + SEQ.pack(seq)


def dedup_key(topic_id: int, dedup_id: bytes) -> bytes:
    return DEDUP_PREFIX + ID.pack(topic_id) + dedup_id


def dedup_age_key(seen_us: int, topic_id: int, dedup_id: bytes) -> bytes:
    return DEDUP_AGE_PREFIX + SEQ.pack(seen_us) + ID.pack(topic_id) + dedup_id


def split_dedup_age_key(store_key: bytes) -> tuple[int, int, bytes]:
    """(seen µs, topic id, DEDUP-ID) of a ``U`` key."""
    seen_us, topic_id = SEQ.unpack_from(store_key, 1)[0], ID.unpack_from(store_key, 9)[0]
    return seen_us, topic_id, store_key[9 + ID.size:]


def seq_at_end(store_key: bytes) -> int:
    """The sequence number that ends a topic log or group key."""
    seq: int = SEQ.unpack_from(store_key, len(store_key) - SEQ.size)[0]
    return seq


def scheduled_prefix(topic: str) -> bytes:
    name = topic.encode()
    return SCHEDULED_PREFIX + bytes([len(name)]) + name


def scheduled_key(topic: str, due_us: int, seq: int) -> bytes:
    return scheduled_prefix(topic) + SEQ.pack(due_us) + SEQ.pack(seq)


def split_scheduled_key(store_key: bytes) -> tuple[int, int]:
    """(due µs, seq) of an ``S`` key."""
    due_us, seq = SEQ.unpack_from(store_key, len(store_key) - 16)[0], \
        SEQ.unpack_from(store_key, len(store_key) - 8)[0]
    return due_us, seq


def scheduled_count_key(topic: str) -> bytes:
    return SCHEDULED_COUNT_PREFIX + topic.encode()


def scheduled_seq_key(seq: int) -> bytes:
    return SCHEDULED_SEQ_PREFIX + SEQ.pack(seq)


def scheduled_copy_prefix(origin: bytes) -> bytes:
    return SCHEDULED_COPY_PREFIX + origin


def scheduled_copy_key(origin: bytes, due_us: int, seq: int) -> bytes:
    return SCHEDULED_COPY_PREFIX + origin + SEQ.pack(due_us) + SEQ.pack(seq)


def scheduled_copy_seq_key(origin: bytes, seq: int) -> bytes:
    return SCHEDULED_COPY_SEQ_PREFIX + origin + SEQ.pack(seq)


def expiry_key(expires_us: int, seq: int) -> bytes:
    return EXPIRY_PREFIX + SEQ.pack(expires_us) + SEQ.pack(seq)


def split_expiry_key(store_key: bytes) -> tuple[int, int]:
    """(expires µs, seq) of an ``X`` key."""
    expires_us, seq = SEQ.unpack_from(store_key, 1)[0], SEQ.unpack_from(store_key, 9)[0]
    return expires_us, seq


def dead_reason_key(seq: int) -> bytes:
    return DEAD_REASON_PREFIX + SEQ.pack(seq)


def lane_prefix(topic_id: int) -> bytes:
    return LANE_PREFIX + ID.pack(topic_id)


def lane_key(topic_id: int, priority: int, seq: int) -> bytes:
    return LANE_PREFIX + ID.pack(topic_id) + bytes([9 - priority]) + SEQ.pack(seq)
