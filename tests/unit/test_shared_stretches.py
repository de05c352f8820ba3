"""A topic's groups that read the same stretch of its log share the read: the log's
walk (pzq.store.log_blocks), the records (pzq.delivery.groups), the batch entries and
their sizes (pzq.serving.sending, pzq.serving.batching), each made once for all of
them. What each consumer receives is what it received when each group read and made
its own: the same scripts of sends, ACKs and NACKs, run on two nodes (a node's loop on
inproc endpoints driven wake by wake, a real store), one with every read's lists copied
(so nothing is shared), give the same frames to every consumer but for the send time."""

from __future__ import annotations

import random
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate

import pytest
import zmq

from pzq.clock import Now
from pzq.node.device import Device
from pzq.protocol import consume as wire
from pzq.protocol import frames
from pzq.serving.batching import MAX_BATCH_BYTES, OpenBatch
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.serving.holding import ServedConsumer
from pzq.store import log_blocks
from pzq.store.kept_reads import KEPT_RECORD_BYTES, KEPT_SEQS, KeptReads
from pzq.store.log_blocks import LogBlocks
from tests.support.devices import wake, wake_until

pytestmark = pytest.mark.timeout(120)
QUIET_WAKES = 3  # wakes in a row that bring no consumer anything: the node is done
ROLES = ("receive", "send", "monitor", "consume")  # each on inproc: two nodes at once
PAYLOAD = b"ghijklmnopqrstuvwxyz"  # (no hex digit: a node id is told apart in a frame)


@dataclass
class Client:
    socket: zmq.Socket
    group: bytes
    protocol: int
    frames: list[list[bytes]] = field(default_factory=list)  # as received, time cut out
    held: list[bytes] = field(default_factory=list)  # keys not answered yet


@dataclass
class Script:
    """What one run does: the groups' consumers, the messages, the answers."""

    seed: int
    headers: bool  # --delivery-headers: every delivery alone, its count in its headers
    consumers: list[tuple[bytes, int, int]]  # group, window, protocol
    messages: list[tuple[tuple[bytes, ...], list[bytes]]]  # headers, parts
    join_after: bool = False  # the consumers come once every message is stored (only
    # then are there messages with a TTL: read before it is over, they would go or not
    # by the clock)
    rounds: int = 12


def script_of(seed: int) -> Script:
    rng = random.Random(seed)
    join_after = rng.random() < 0.5
    groups = [b"g%d" % n for n in range(rng.choice((2, 3, 3, 4)))]
    consumers = [(group, rng.choice((1, 7, 50, 100, 100, 150)), rng.choice((1, 2, 2, 2)))
                 for group in groups for _ in range(rng.choice((1, 1, 2)))]
    messages = []
    for n in range(rng.randrange(80, 400)):
        headers: tuple[bytes, ...] = (b"TOPIC:t",)
        if rng.random() < 0.2:  # headers of several lengths: records of several shapes
            headers += (b"k%d:%s" % (n % 3, PAYLOAD[:rng.randrange(1, 12)]),)
        if join_after and rng.random() < 0.05:
            headers += (b"TTL:1",)  # expired by the time any group reads it
        if rng.random() < 0.03:
            headers += (b"PRIORITY:%d" % rng.randrange(1, 9),)
        parts = [bytes(rng.choices(PAYLOAD, k=rng.choice((0, 1, 10, 100, 300))))
                 for _ in range(rng.choice((1, 1, 1, 2)))]
        messages.append((headers, parts))
    return Script(seed, rng.random() < 0.25, consumers, messages, join_after)


def dealer(context: zmq.Context, endpoint: str) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


def settle(device: Device, clients: list[Client], node_id: bytes) -> None:
    """Wakes until QUIET_WAKES in a row bring no consumer anything; what came is read."""
    quiet = 0
    while quiet < QUIET_WAKES:
        wake(device, 0)
        came = False
        for client in clients:
            while client.socket.poll(0):
                came = True
                take(client, client.socket.recv_multipart(), node_id)
        quiet = 0 if came else quiet + 1


def take(client: Client, message: list[bytes], node_id: bytes) -> None:
    """A message as the client received it, its send time cut out (the clock's) and the
    node's id (each node's own) written as one id."""
    decoded = wire.decode_node_message(message)
    assert decoded.verb != wire.ERROR, decoded.error
    if decoded.verb == wire.BATCH:
        client.held += [key for key, _, _ in decoded.entries]
        kept = message[:3] + message[4:]
    elif decoded.verb == wire.DELIVER:
        client.held.append(decoded.key)
        kept = message[:4] + message[5:]
    else:
        return  # (heartbeats)
    client.frames.append([part.replace(node_id, b"N" * len(node_id)) for part in kept])


def run(device: Device, context: zmq.Context, script: Script) -> dict[int, list[list[bytes]]]:
    """The script on a node: each consumer's frames."""
    rng = random.Random(script.seed)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    consume.topics.topic("t", Now.read().wall_us)  # as a first message makes it
    node_id = consume.topics.store.node_id
    clients: list[Client] = []
    producer = dealer(context, device.bound()["receive"])
    try:
        if not script.join_after:
            join(device, context, script, clients)
        for n, (headers, parts) in enumerate(script.messages):
            producer.send_multipart(frames.encode_produce(b"%d" % n, parts, headers))
        acked: list[bool] = []

        def all_acked() -> bool:
            while producer.poll(0):
                acked.append(frames.decode_producer_ack(producer.recv_multipart()).ok)
            return len(acked) == len(script.messages)
        wake_until(device, all_acked, "the producer's ACKs")
        if script.join_after:
            time.sleep(0.01)  # (every TTL of 1 ms over)
            join(device, context, script, clients)
        for _ in range(script.rounds):
            settle(device, clients, node_id)
            for client in clients:
                answer(client, rng)
        settle(device, clients, node_id)
    finally:
        producer.close(0)
        for client in clients:
            client.socket.close(0)
    return {n: client.frames for n, client in enumerate(clients)}


def answer(client: Client, rng: random.Random) -> None:
    """Most of what the client holds ACKed, some given back (NACK), some kept a round."""
    rng.shuffle(client.held)
    cut = [rng.randrange(len(client.held) + 1) for _ in range(2)]
    acks, nacks = client.held[:min(cut)], client.held[min(cut):max(cut)]
    if rng.random() < 0.3:
        acks, nacks = acks + nacks, []
    client.held = client.held[max(cut):]
    for verb, keys in ((wire.ACK, acks), (wire.NACK, nacks)):
        if keys:
            client.socket.send_multipart([verb, *sorted(keys)])


def join(device: Device, context: zmq.Context, script: Script, clients: list[Client]) -> None:
    for group, window, protocol in script.consumers:
        client = Client(dealer(context, device.bound()["consume"]), group, protocol)
        clients.append(client)
        client.socket.send_multipart([wire.CONSUME, b"t", group, b"%d" % window,
                                      b"START:earliest", b"PROTOCOL:%d" % protocol])
        wake_until(device, lambda c=client: c.socket.poll(0) != 0, "CONSUMING")
        assert client.socket.recv_multipart()[0] == wire.CONSUMING


@contextmanager
def nothing_shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every read of a log answers with lists of its own (so no group's read, records,
    entries or sizes are another's)."""
    read = LogBlocks.read

    def copied(self: LogBlocks, *args: object) -> tuple[list[int], list[bytes], bool]:
        seqs, tags, last = read(self, *args)  # type: ignore[arg-type]
        return list(seqs), list(tags), last

    with monkeypatch.context() as patch:
        patch.setattr(LogBlocks, "read", copied)
        yield


@pytest.mark.parametrize("seed", range(12))
def test_each_consumer_gets_the_same_frames_whether_or_not_its_groups_share_reads(
        seed: int, open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    script = script_of(seed)
    options = ("--delivery-headers",) if script.headers else ()
    shared = run(open_device(*options, roles=ROLES), context, script)
    with nothing_shared(monkeypatch):
        alone = run(open_device(*options, roles=ROLES), context, script)
    assert shared == alone
    assert any(shared.values())


def test_three_groups_reading_one_stretch_walk_the_log_and_make_its_entries_once(
        open_device: Callable[..., Device], context: zmq.Context,
        monkeypatch: pytest.MonkeyPatch):
    """Three groups (a consumer each, protocol 2, room for all) get the same 200
    messages in one wake: one walk of the log and one making of their entries serve
    the three, and the three BATCHes' entries are the same bytes."""
    device = open_device(roles=ROLES)
    walks: list[int] = []
    expand = log_blocks._expand

    def counted(*args: object) -> None:
        walks.append(1)
        expand(*args)  # type: ignore[arg-type]

    script = Script(0, False, [(b"g%d" % n, 200, 2) for n in range(3)],
                    [((b"TOPIC:t",), [b"m%d" % n]) for n in range(200)], True, rounds=0)
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    made: list[int] = []
    entries_of = consume.sender._entries_made

    def making(*args: object) -> tuple[list[bytes], bytes | None]:
        made.append(1)
        return entries_of(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(log_blocks, "_expand", counted)
    monkeypatch.setattr(consume.sender, "_entries_made", making)
    received = run(device, context, script)
    batches = [message for message in (received[0] + received[1] + received[2])]
    assert len(batches) == 3, batches  # one BATCH a group: 200 entries each
    assert batches[0][3:] == batches[1][3:] == batches[2][3:]  # (the group names differ)
    assert len(walks) == 1  # one block of the log, walked once for three groups
    assert len(made) == 1


class EachRunAddedUp(OpenBatch):
    """A batch as it added up each run's slice at each call (before the sums were kept
    a list of entries): the reference."""

    def add_run(self, consumer: ServedConsumer, entries: list[bytes], start: int, stop: int,
                sent_us: int, ack_timeout_us: int) -> int:
        self._open_for(consumer, sent_us, ack_timeout_us)
        sizes = list(accumulate(map(len, entries[start:stop]), initial=self.size))
        count = min(bisect_left(sizes, MAX_BATCH_BYTES, 1), stop - start)
        self.entries += entries[start:start + count]
        self.size = sizes[count]
        if self.size >= MAX_BATCH_BYTES:
            self.close()
        return start + count


def test_runs_added_with_their_sums_kept_close_batches_where_each_added_up_did(
        context: zmq.Context):
    """Runs of entries of any sizes (some over a batch's bound together), each list
    added in pieces to several consumers in turn (as a topic's groups add one run's
    entries): the same BATCHes as when each piece was added up on its own."""
    rng = random.Random(7)
    lists = [[bytes(rng.randrange(1, 400_000 if rng.random() < 0.3 else 300))
              for _ in range(rng.randrange(1, 40))] for _ in range(6)]
    received = []
    for kind in (OpenBatch, EachRunAddedUp):
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(f"inproc://runs-{kind.__name__}")
        peers = []
        for name in (b"c1", b"c2", b"c3"):
            peer = context.socket(zmq.DEALER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.setsockopt(zmq.IDENTITY, name)
            peer.connect(f"inproc://runs-{kind.__name__}")
            peers.append(peer)
        consumers = [ServedConsumer(name, None, 10_000, 0.0,  # type: ignore[arg-type]
                                    head=[name, wire.BATCH, b"t", b"g"])
                     for name in (b"c1", b"c2", b"c3")]
        batch, steps, ends = kind(router), random.Random(3), []
        for _ in range(300):
            entries = steps.choice(lists)
            start = steps.randrange(len(entries))
            stop = steps.randrange(start + 1, len(entries) + 1)
            middle = steps.randrange(start, stop + 1)
            for consumer in steps.sample(consumers, steps.randrange(1, 4)):
                for at, end in ((start, middle), (middle, stop)):  # (one batch, or more)
                    while at < end:  # as pzq.serving.sending fills a consumer's
                        at = batch.add_run(consumer, entries, at, end, 1, 2)
                        ends.append(at)
            if steps.random() < 0.3:
                batch.close()
        batch.close()
        got = [(peer.getsockopt(zmq.IDENTITY), peer.recv_multipart())
               for peer in peers for _ in iter(lambda p=peer: p.poll(100), 0)]
        received.append((ends, got))
        for socket in (router, *peers):
            socket.close(0)
    assert received[0] == received[1]
    assert any(len(frames[-1]) >= MAX_BATCH_BYTES for _, frames in received[0][1])


def test_reads_kept_are_taken_by_their_own_list_and_stay_within_their_bounds():
    kept: KeptReads[str] = KeptReads()
    reads = [list(range(at, at + 100)) for at in range(0, 10_000, 100)]
    for n, seqs in enumerate(reads):
        kept.keep(seqs, [b"r"] * len(seqs), f"made {n}")
    assert kept.get(reads[-1]) == "made 99"
    assert kept.get(list(reads[-1])) is None  # an equal list is another read's
    held = [n for n, seqs in enumerate(reads) if kept.get(seqs) is not None]
    assert held == list(range(100 - KEPT_SEQS // 100, 100))  # the newest, within the seqs
    long_one = list(range(20_000, 20_010))
    kept.keep(long_one, [b"r"] * 9 + [bytes(KEPT_RECORD_BYTES + 1)], "long")
    assert kept.get(long_one) is None  # (a record over the bound: not kept)
    kept.clear()
    assert kept.get(reads[-1]) is None
