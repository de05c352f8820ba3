"""What each client key may do (pzq.authorization) as a part of the loop: the rules
are read again at the wake a SIGHUP caused (its handler only asks), and the parts
that let clients in under the old rules hear of the new (``RulesReloaded``); the
refusals are counted in STATS (``forbidden``, by kind)."""

from __future__ import annotations

from pzq.authorization import Authorization, RulesReloaded
from pzq.clock import Now
from pzq.events import EventHub
from pzq.parts import Figures, Part


class AuthorizationPart(Part):
    def __init__(self, authorization: Authorization, hub: EventHub) -> None:
        self.authorization = authorization
        self.hub = hub

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        if self.authorization.reload_if_asked():  # the signal's byte woke the loop
            self.hub.publish(RulesReloaded())

    def figures(self, now: Now) -> Figures:
        return self.authorization.figures()
