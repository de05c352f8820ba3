"""How the handshakes of this node's links to its peers end, told by the DEALERs'
own monitors: a peer that refuses this node's CURVE key (its ZAP's status), hangs up
on the handshake, or speaks another mechanism is said once per peer and reason
(``peer_handshake_refused``), not at each of ZeroMQ's retries (ten a second), and
``peer_never_reached`` names the reason.

The monitors are read at the heartbeat's tick, not polled: the loop's poll is as it
was, and a link that shakes hands once costs one event. They must not be left
unread: libzmq's I/O thread blocks on a full monitor pipe (about 2,000 events),
which stalls every socket of the context; at ten retries a second, a tick of at most
a second leaves a few there.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq.cluster.peers import PeerTable
from pzq.logs import get_logger
from pzq.zmqio import Socket, readable

log = get_logger("pzq.cluster")

EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
MOST_PER_TICK = 10_000  # events read from one monitor at a tick (a few are there)


def refusal(event: int, value: int, curve: bool, own_keys: bool) -> str | None:
    """Why a peer did not take this node's handshake, in pzq's words; None when it took
    it. ``curve``: this node speaks CURVE; ``own_keys``: each node has its own key pair
    (--cluster-authorized-keys), else they share one."""
    keys = ("--cluster-authorized-keys" if own_keys
            else "--curve-authorized-keys (the nodes' shared key pair)")
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"the peer refused this node's public key (ZAP status {value}): it is not "
                f"among the keys in the peer's {keys}")
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if not curve:
            return ("the peer hung up on this node's handshake (it requires CURVE? this "
                    "node has no --curve-secret-key)")
        served = ("its NAME.key in --cluster-authorized-keys (--nodes NAME=ENDPOINT)"
                  if own_keys else "the nodes' shared key pair")
        return ("the peer hung up on this node's CURVE handshake: its public key is not "
                f"{served}, or it serves no CURVE")
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return ("the peer serves no CURVE (started without --curve-secret-key?)" if curve
                    else "the peer requires CURVE: this node has no --curve-secret-key")
        return f"the handshake broke off (ZeroMQ protocol error {value:#x})"
    return None


class PeerHandshakes:
    """The monitors of the links to the peers, and the reason each peer last gave."""

    def __init__(self, peers: PeerTable, curve: bool, own_keys: bool) -> None:
        self.peers = peers
        self.curve = curve
        self.own_keys = own_keys
        self.monitors: dict[str, Socket] = {}  # endpoint -> its DEALER's monitor
        self._dealers: dict[str, Socket] = {}
        self._told: set[str] = set()  # peers whose reason now is a refusal, not a hang-up
        self._hung_up_before: set[str] = set()  # peers that hung up at the last tick

    def watch(self, endpoint: str, dealer: Socket) -> None:
        """Before ``dealer`` connects: its first handshake is seen too."""
        self.monitors[endpoint] = dealer.get_monitor_socket(EVENTS)
        self._dealers[endpoint] = dealer

    def read(self) -> None:
        """How the handshakes since the last tick ended: a new reason is logged, and
        kept on the peer (``handshake_refused``) for the warnings to name."""
        for endpoint, monitor in self.monitors.items():
            ended = []
            for _ in range(MOST_PER_TICK if readable(monitor) else 0):  # (no raise: cheaper)
                try:
                    event = recv_monitor_message(monitor, zmq.NOBLOCK)
                except zmq.Again:
                    break
                ended.append((int(event["event"]), int(event["value"])))
            if ended:
                self._ended(endpoint, ended)

    def _ended(self, endpoint: str, ended: list[tuple[int, int]]) -> None:
        """A tick's handshakes with one peer. A hang-up tells less than a refusal, and
        which of the two a retry meets is a race (which side reads the other's greeting
        first): a hang-up is said only when a second tick sees it with no refusal."""
        if ended[-1][0] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._say(endpoint, "", told=False)
            return
        told = [reason for event, value in ended
                if event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                and (reason := refusal(event, value, self.curve, self.own_keys))]
        if told:
            self._say(endpoint, told[-1], told=True)
        elif endpoint in self._told:
            pass  # a hang-up after a refusal: the refusal stands
        elif endpoint in self._hung_up_before:
            self._say(endpoint, refusal(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 0, self.curve,
                                        self.own_keys) or "", told=False)
        else:
            self._hung_up_before.add(endpoint)

    def _say(self, endpoint: str, reason: str, told: bool) -> None:
        """``reason`` is the peer's now ("": its handshake was taken), logged if new;
        ``told``: the peer's own refusal, not a hang-up."""
        peer = self.peers.peers[endpoint]
        if reason and reason != peer.handshake_refused:
            log.warning("peer_handshake_refused", endpoint=endpoint, reason=reason)
        peer.handshake_refused = reason
        self._hung_up_before.discard(endpoint)
        (self._told.add if told else self._told.discard)(endpoint)

    def close(self) -> None:
        for endpoint, monitor in self.monitors.items():
            self._dealers[endpoint].disable_monitor()
            monitor.close(0)
