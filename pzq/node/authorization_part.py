"""What each client key may do (pzq.authorization) as a part of the loop: the rules
and the CURVE key directories are read again at the wake a SIGHUP caused (its handler
only asks), and the parts that let clients in under the old rules hear of the new
(``RulesReloaded``); the refusals are counted in STATS (``forbidden``, by kind)."""

from __future__ import annotations

from pzq.authorization import Authorization, RulesReloaded
from pzq.clock import Now
from pzq.events import EventHub
from pzq.node.key_reload import KeyDirectories
from pzq.parts import Figures, Part


class AuthorizationPart(Part):
    def __init__(self, authorization: Authorization, hub: EventHub,
                 keys: KeyDirectories | None = None) -> None:
        self.authorization = authorization
        self.hub = hub
        self.keys = KeyDirectories() if keys is None else keys

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        # the signal's byte woke the loop: the keys first, so the rules' warnings
        # about keys not admitted speak of the directory as it is now
        revoked = self.keys.reload_if_asked() \
            and self.authorization.readmit(self.keys.admitted())
        if self.authorization.reload_if_asked() or revoked:
            self.hub.publish(RulesReloaded())

    def figures(self, now: Now) -> Figures:
        return self.authorization.figures()
