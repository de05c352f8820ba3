"""The node's ZPER broker sockets: writer (ROUTER), ack (XPUB) and relay (ROUTER).

All three serve the archive (pzq.archive.zper_writer, zper_ack, zper_relay) from
the loop's thread. One wake: take writes (fsyncing mode 2 topics), answer and ack
the writes that flushes made durable (and send acks a full queue refused before),
note subscriptions and relay clients, and
on a ``--relay-poll`` tick push new records to the relay clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import zmq

from pzq import sockets
from pzq.archive.writer import Archive
from pzq.archive.zper_ack import ACK_SNDHWM, ZperAck
from pzq.archive.zper_relay import ZperRelay
from pzq.archive.zper_writer import ZperWriter
from pzq.clock import Now
from pzq.node.config import Config
from pzq.parts import RELAY_POLL, Part
from pzq.rates import Rates
from pzq.security import KeyPair
from pzq.zmqio import POLLIN, Context, Events, Socket

WRITER_RCVHWM = 100_000


@dataclass
class ZperSockets:
    writer: Socket | None
    ack: Socket | None
    relay: Socket | None

    def bound(self) -> dict[str, Socket]:
        named = {"zper_writer": self.writer, "zper_ack": self.ack, "zper_relay": self.relay}
        return {name: socket for name, socket in named.items() if socket is not None}

    def pollable(self) -> list[Socket]:
        return list(self.bound().values())

    def close(self) -> None:
        for socket in self.bound().values():
            socket.close()


def open_zper_sockets(context: Context, config: Config, curve: KeyPair | None,
                      opened: list[Socket]) -> ZperSockets | None:
    """Bind the ZPER sockets configured (kept in ``opened`` to close on failure)."""
    def bind(kind: int, dsn: str | None, flag: str,
             options: dict[int, int] | None = None) -> Socket | None:
        if dsn is None:
            return None
        socket = sockets.bind(context, kind, dsn, flag, curve, options=options)
        opened.append(socket)
        return socket

    found = ZperSockets(
        bind(zmq.ROUTER, config.zper_writer_dsn, "--zper-writer-dsn",
             {zmq.RCVHWM: WRITER_RCVHWM}),
        bind(zmq.XPUB, config.zper_ack_dsn, "--zper-ack-dsn", {zmq.SNDHWM: ACK_SNDHWM}),
        bind(zmq.ROUTER, config.zper_relay_dsn, "--zper-relay-dsn"))
    return found if found.bound() else None


class ZperBroker(Part):
    def __init__(self, archive: Archive, zper: ZperSockets, default_topic: str,
                 batch: int, mono: float) -> None:
        """``mono``: monotonic seconds now (the relay's clients known from before)."""
        self.sockets = zper
        self.batch = batch
        self.ack = ZperAck(zper.ack) if zper.ack is not None else None
        self.writer = ZperWriter(archive, default_topic, keep_all=self.ack is not None)
        self.relay = ZperRelay(archive, zper.relay, mono) if zper.relay is not None else None
        self.relay_due = False
        self.rates = Rates(("written", "bytes"))

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if RELAY_POLL in reasons:
            self.relay_due = True

    def answer(self, events: Events, now: Now) -> None:
        """After the archive's flush: what is durable is told to the writers."""
        self.wake(events, now.wall_us / 1e6, now.mono)

    def wake(self, events: Events, now: float, mono: float) -> None:
        writer_socket = self.sockets.writer
        if writer_socket is not None and events.get(writer_socket, 0) & POLLIN:
            self.writer.take(writer_socket, self.batch, now)
        durable = self.writer.durable()
        if durable and writer_socket is not None:
            self.writer.respond(writer_socket, durable)
        if self.ack is not None:
            self.ack.publish(durable)  # and sends what a full queue refused before
        if self.ack is not None and events.get(self.ack.socket, 0) & POLLIN:
            self.ack.take_subscriptions(self.batch)
        if self.relay is not None:
            if events.get(self.relay.socket, 0) & POLLIN:
                self.relay.take(self.batch)
            if self.relay_due:
                self.relay_due = False
                self.relay.push(mono)
        self.rates.sample(mono, self.writer.figures)

    def timeout_ms(self, now: Now) -> int | None:
        """How soon the loop must wake for this broker's own sake; None: on events."""
        return self.ack.timeout_ms() if self.ack is not None else None

    def snapshot(self, mono: float) -> dict[str, object]:
        figures = self.writer.figures
        rates = self.rates.rates(mono, figures)
        return {"writer": {"written": figures.written, "bytes": figures.bytes,
                           "refused": figures.refused, "responses": figures.responses,
                           "written_by_mode": list(figures.by_mode),
                           "messages_per_second_1s": rates["written_1s"],
                           "bytes_per_second_1s": rates["bytes_1s"],
                           "messages_per_second_60s": rates["written_60s"],
                           "bytes_per_second_60s": rates["bytes_60s"]},
                "ack": {"subscriptions": self.ack.subscriptions if self.ack else 0,
                        "published": self.ack.published if self.ack else 0,
                        "dropped": self.ack.dropped if self.ack else 0,
                        "waiting": self.ack.waiting if self.ack else 0},
                "relay": {"clients": self.relay.connected if self.relay else 0,
                          "known_clients": len(self.relay.clients) if self.relay else 0,
                          "relayed": self.relay.relayed if self.relay else 0,
                          "refused": self.relay.refused if self.relay else 0}}
