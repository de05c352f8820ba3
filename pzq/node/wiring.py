"""What the node lends the plug-in endpoints it opens (pzq.node.endpoints): its context,
CURVE and event hub, what each client key may do, its settings, its archive, the time
of the opening, and a bind that applies the node's CURVE. Each plug-in asks for what
it uses through a protocol of its own (pzq.archive.wiring), which this meets."""

from __future__ import annotations

from dataclasses import dataclass

from pzq import sockets
from pzq.archive.contract import NoArchiving
from pzq.archive.tier.archiving import Archiving
from pzq.archive.tier.tier import ArchiveTier
from pzq.authorization import Authorization
from pzq.clock import Now
from pzq.events import EventHub
from pzq.node.config import Config
from pzq.security import NodeSecurity
from pzq.zmqio import Context, Socket


@dataclass(frozen=True)
class NodeWiring:
    context: Context
    security: NodeSecurity
    config: Config
    archiving: Archiving | NoArchiving
    hub: EventHub
    now: Now
    authorization: Authorization

    @property
    def archive(self) -> ArchiveTier:
        return self.archiving.tier

    def bind(self, kind: int, dsn: str, flag: str,
             options: dict[int, int] | None = None) -> Socket:
        return sockets.bind(self.context, kind, dsn, flag, self.security, options=options)
