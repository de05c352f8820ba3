"""What a consumer that hears nothing finds at its endpoints: nothing there, still
connecting, connected and waiting, or what is wrong: a node that requires CURVE
or does not use it, a CURVE key refused, another of the node's endpoints.

The consumer's own handshakes (pzq.cli.handshake_watch) say whether the node took
it; the greeting says the node's mechanism (pzq.endpoint_probe) and a REQ probe
whether a ROUTER answers (pzq.client.router_probe, which a group's consumer asks
itself): a consumer of --send-dsn needs the DEALER there, a group's consumer the
ROUTER of --consume-dsn.
"""

from __future__ import annotations

from collections.abc import Sequence

from pzq import endpoint_probe, reach
from pzq.cli.handshake_watch import FAILED, KEY_REFUSED, HandshakeWatch
from pzq.cli.waiting import endpoint_state
from pzq.client import router_probe
from pzq.security import ClientSecurity

NOT_ZEROMQ = ("connected, but nothing greets there as ZeroMQ does (not a pzq endpoint, or a "
              "node that is stopped)")
NEEDS_CURVE = "the node requires CURVE: give --curve-client-key and --curve-server-key"
NO_CURVE = ("the node does not use CURVE ({mechanism}): leave out --curve-client-key and "
            "--curve-server-key")
KEY_NOT_TAKEN = ("the node refused this client's CURVE key: is its public key in the node's "
                 "--curve-authorized-keys?")
# --send-dsn's ZAP refuses a key the --authorization rules keep off it as it refuses an
# unknown one: a key that is in the directory is sent looking for nothing there
SEND_KEY_NOT_TAKEN = (KEY_NOT_TAKEN + " With --authorization, do its rules give it *:default "
                      "(--send-dsn takes no other key)?")
CURVE_FAILED = ("the CURVE handshake fails: is --curve-server-key the node's public key (its "
                ".key file)?")
HANDSHAKE_FAILED = "connected, but the ZeroMQ handshake fails (a socket of another kind?)"
NOT_SEND = ("connected, but this is not a node's --send-dsn: a ROUTER answers there (its "
            "--receive-dsn or --monitor-dsn; its --consume-dsn needs --topic and --group)")
# A node runs without --consume-dsn unless told: "is the node running?" alone misleads.
NO_CONSUME_ENDPOINT = ("nothing answers there yet (is the node running, and started with "
                       "--consume-dsn? consumer groups are off without it)")
NOT_CONSUME = ("connected, but this is not a node's --consume-dsn: no ROUTER answers there "
               "(its --send-dsn? that needs no --topic and --group)")


class ConsumerEndpoints:
    """``group``: the consumer is a group's (on --consume-dsn), else of --send-dsn.
    Its client takes ``watch.context``, so that its handshakes are seen."""

    def __init__(self, curve: ClientSecurity, group: bool) -> None:
        self.curve = curve
        self.group = group
        self.watch = HandshakeWatch()

    def states(self, dsns: Sequence[str], awaited: str) -> str:
        return "; ".join(self.state(dsn, awaited) for dsn in dsns)

    def state(self, dsn: str, awaited: str) -> str:
        """What is found at ``dsn``; ``awaited`` names what has not come, when nothing
        is wrong there."""
        answers = reach.accepts_connections(dsn)
        if answers is False and self.group:
            return f"{dsn}: {NO_CONSUME_ENDPOINT}"
        if answers is not True:
            return endpoint_state(dsn, self.curve, awaited, awaited)
        return f"{dsn}: {self._problem(dsn) or 'connected, ' + awaited}"

    def _problem(self, dsn: str) -> str | None:
        mechanism = endpoint_probe.mechanism(dsn)
        if mechanism is None:
            return NOT_ZEROMQ
        if (mechanism == "CURVE") != self.curve.on:
            return NO_CURVE.format(mechanism=mechanism) if self.curve.on else NEEDS_CURVE
        ended = self.watch.outcome(dsn)
        if ended == KEY_REFUSED:
            return KEY_NOT_TAKEN if self.group else SEND_KEY_NOT_TAKEN
        if ended == FAILED:
            return CURVE_FAILED if self.curve.on else HANDSHAKE_FAILED
        router = router_probe.is_router(dsn, self.curve) is True
        if router != self.group:
            return NOT_CONSUME if self.group else NOT_SEND
        return None

    def close(self) -> None:
        self.watch.close()
