"""What the node lends the archive's plug-in endpoints when it opens them (the ZPER
readers' endpoint, the ZPER writer, ack publisher and relay): the archive, the
node's event hub, what each client key may do, a few settings, the time, and a bind
with the node's CURVE (pzq.node.wiring meets it). Each is opened only with
--archive-dir (checked when the options are read)."""

from __future__ import annotations

from typing import Protocol

from pzq.archive.tier.tier import ArchiveTier
from pzq.authorization import Authorization
from pzq.clock import Now
from pzq.events import EventHub
from pzq.zmqio import Socket


class PlugInSettings(Protocol):
    @property
    def batch_size(self) -> int: ...

    @property
    def archive_topic(self) -> str: ...

    @property
    def relay_poll_us(self) -> int: ...

    @property
    def frame_limit(self) -> int: ...


class ArchiveWiring(Protocol):
    @property
    def archive(self) -> ArchiveTier: ...

    @property
    def hub(self) -> EventHub: ...

    @property
    def authorization(self) -> Authorization: ...  # who may write to which topics

    @property
    def config(self) -> PlugInSettings: ...

    @property
    def now(self) -> Now: ...

    def bind(self, kind: int, dsn: str, flag: str,
             options: dict[int, int] | None = None) -> Socket: ...
