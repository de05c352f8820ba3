"""What each client key may do (pzq.authorization) as a part of the loop: the rules
are read again at the wake a SIGHUP caused (its handler only asks), and the
refusals are counted in STATS (``forbidden``, by kind)."""

from __future__ import annotations

from pzq.authorization import Authorization
from pzq.clock import Now
from pzq.parts import Figures, Part


class AuthorizationPart(Part):
    def __init__(self, authorization: Authorization) -> None:
        self.authorization = authorization

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        self.authorization.reload_if_asked()  # the signal's byte woke the loop

    def figures(self, now: Now) -> Figures:
        return self.authorization.figures()
