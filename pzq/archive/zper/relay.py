"""ZPRelay: every new record of a topic pushed to the clients that asked for it.

A client is a DEALER with a ZPER identity naming its topic that announces itself
once with any message (``ZMQ_PROBE_ROUTER`` set on the client sends an empty one
as it connects). libzmq's ROUTER can send to a connected peer by the identity of
its handshake, but tells the node of the peer only when it sends something
(ZMQ_ROUTER_NOTIFY is a draft API, absent from pyzmq's builds), and a ZPER
identity ends in 16 random bytes the node cannot work out from the topic. From then
on, every ``--relay-poll`` ms, the node sends it each record appended to its topic
since: one message per record, the record's frames as they are (a ZPER producer's
frames, or pzq's ``[key][metadata][parts]``).

Flow control is the high-water mark: when a client's queue is full the node stops
sending to it and goes on from the same record at the next poll, so a slow client
misses nothing while it stays connected. The node keeps the clients it knows in
CLIENTS_FILE in the archive directory: after a restart it goes on sending to each
from its topic's end at the restart, as ZPER's relay does, as soon as the client's
socket has reconnected by itself (a DEALER does not announce itself again). A
client the node cannot reach (disconnected) keeps its place; one unreachable for
FORGET_S is forgotten. A client that announces itself again starts from the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import zmq

from pzq.archive.format.records import decode_records
from pzq.archive.tier.archive import Archive
from pzq.archive.wiring import ArchiveWiring
from pzq.clock import Now
from pzq.endpoints import Endpoint, Metric, PlugIn
from pzq.errors import ArchiveFormatError, DecodeError
from pzq.logs import get_logger
from pzq.parts import RELAY_POLL, Figures, Part
from pzq.protocol import zper as zp
from pzq.zmqio import POLLIN, Events, Socket, drain, send_frames

log = get_logger("pzq.zper")
READ_BYTES = 1 << 20  # read from a topic's log this much at a time
MAX_CLIENTS = 10_000
CLIENTS_FILE = "zper-relay-clients.json"
FORGET_S = 600.0


@dataclass
class RelayClient:
    topic: str
    position: int  # the offset of the next record to send
    unreachable_since: float | None = None  # monotonic seconds


class ZperRelay:
    def __init__(self, archive: Archive, socket: Socket, now: float) -> None:
        """``now``: monotonic seconds, when the clients known before a restart are
        taken as last heard."""
        self.archive = archive
        self.socket = socket
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a full queue says so: flow control
        self.clients: dict[bytes, RelayClient] = {}
        self.relayed = 0
        self.refused = 0
        self._logged: set[str] = set()
        self._path = archive.directory / CLIENTS_FILE
        self._load(now)

    def _load(self, now: float) -> None:
        """The clients known before a restart, each from its topic's end now."""
        try:
            known = json.loads(self._path.read_text())
            pairs = [(bytes.fromhex(identity), str(topic)) for identity, topic in known.items()]
        except (OSError, ValueError, AttributeError):
            return  # none kept, or unreadable: clients announce themselves again
        for identity, topic in pairs[:MAX_CLIENTS]:
            self.clients[identity] = RelayClient(topic, self._end(topic), now)

    def _save(self) -> None:
        try:
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(json.dumps({identity.hex(): client.topic for identity, client
                                             in self.clients.items()}))
            temporary.replace(self._path)
        except OSError as exc:
            self._refuse(f"cannot keep the relay clients in {self._path}: {exc}")

    def _end(self, topic: str) -> int:
        topic_log = self.archive.log(topic)
        return topic_log.end_offset if topic_log is not None else 0

    def take(self, limit: int) -> None:
        """Clients announcing themselves: each starts at its topic's end."""
        for identity, *_ in drain(self.socket, limit):
            try:
                topic = zp.identity_topic(identity)
            except DecodeError as exc:
                self._refuse(str(exc))
                continue
            if identity not in self.clients and len(self.clients) >= MAX_CLIENTS:
                self._refuse(f"more than {MAX_CLIENTS} relay clients")
                continue
            known = identity in self.clients
            self.clients[identity] = RelayClient(topic, self._end(topic))
            if not known:
                self._save()

    def _refuse(self, reason: str) -> None:
        self.refused += 1
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning("zper_relay_refused", reason=reason)

    def push(self, mono: float) -> None:
        """Send every client what its topic gained since, as far as its queue allows."""
        forgotten = False
        for identity in list(self.clients):
            client = self.clients[identity]
            self._push_one(identity, client, mono)
            since = client.unreachable_since
            if since is not None and mono - since > FORGET_S:
                del self.clients[identity]
                forgotten = True
        if forgotten:
            self._save()

    @property
    def connected(self) -> int:
        return sum(client.unreachable_since is None for client in self.clients.values())

    def _push_one(self, identity: bytes, client: RelayClient, mono: float) -> None:
        topic_log = self.archive.log(client.topic)
        if topic_log is None:
            return
        client.position = max(client.position, topic_log.start_offset)  # retention
        while client.position < topic_log.end_offset:
            try:
                data = topic_log.read(client.position, READ_BYTES)
            except ValueError:
                return
            if not data:
                return
            try:
                records = list(decode_records(data, 0))
            except ArchiveFormatError:
                client.position += len(data)  # a damaged record: its bytes alone
                continue
            for position, frames in records:
                try:
                    send_frames(self.socket, [identity, *frames])
                except zmq.Again:
                    client.position += position
                    return  # its queue is full: the same record at the next poll
                except zmq.ZMQError:
                    client.position += position  # not connected (now): keep its place
                    if client.unreachable_since is None:
                        client.unreachable_since = mono
                    return
                client.unreachable_since = None
                self.relayed += 1
            client.position += len(data)


class ZperRelayPart(Part):
    """--zper-relay-dsn in the loop: clients announcing themselves, and at each
    --relay-poll tick the records their topics gained."""

    def __init__(self, relay: ZperRelay, period_us: int, batch: int) -> None:
        self.relay = relay
        self.period_us = period_us
        self.batch = batch
        self.due = False

    def bound(self) -> list[Socket]:
        return [self.relay.socket]

    def polled(self) -> list[Socket | int]:
        return [self.relay.socket]

    def ticks(self) -> dict[bytes, int]:
        return {RELAY_POLL: self.period_us}

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if RELAY_POLL in reasons:
            self.due = True

    def answer(self, events: Events, now: Now) -> None:
        if events.get(self.relay.socket, 0) & POLLIN:
            self.relay.take(self.batch)
        if self.due:
            self.due = False
            self.relay.push(now.mono)

    def figures(self, now: Now) -> Figures:
        relay = self.relay
        return {"clients": relay.connected, "known_clients": len(relay.clients),
                "relayed": relay.relayed, "refused": relay.refused}

    def close(self) -> None:
        self.relay.socket.close()


def open_relay(wiring: ArchiveWiring, dsn: str) -> Part:
    socket = wiring.bind(zmq.ROUTER, dsn, ZPER_RELAY_DSN.flag)
    return ZperRelayPart(ZperRelay(wiring.archive.archive, socket, wiring.now.mono),
                         wiring.config.relay_poll_us, wiring.config.batch_size)


ZPER_RELAY_DSN = Endpoint(
    "zper_relay", "zper_relay_dsn", "archive: endpoint of the ZPER relay, pushing new "
    "records (off when unset)", needs=("archive_dir",), stats=("zper", "relay"),
    metrics=(Metric("pzq_zper_relayed", "relayed", "Records pushed to ZPER relay clients."),
             Metric("pzq_zper_relay_clients", "clients", "ZPER relay clients connected.",
                    counter=False)))
ZPER_RELAY = PlugIn(ZPER_RELAY_DSN, open_relay)
