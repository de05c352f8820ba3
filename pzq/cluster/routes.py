"""The route table: which node owns each partition of each partitioned topic, and where
clients reach every node (docs/cluster.rst, "Partitioned topics").

Owners come from ``pzq.cluster.placement``; each peer's client endpoints and the
partition counts it knows come in its ROUTING frames (``pzq.protocol.routing``). A
partition count declared on one node is taken by every node that hears of it, so any
node answers the whole table and refuses, naming the owner, a message that belongs
to another node.
"""

from __future__ import annotations

import re

from pzq.cluster.placement import Placement
from pzq.logs import get_logger
from pzq.protocol.headers import partition_of
from pzq.protocol.routing import Routing
from pzq.store.topics import Topic, Topics

log = get_logger("pzq.routes")

MOVED = "MOVED"  # a producer ACK's status: another node owns the message's partition
WILDCARD_HOST = re.compile(r"^(tcp|ws|wss)://(\*|0\.0\.0\.0|\[::\])(:\d+.*)$")


def advertised(endpoint: str, host: str) -> str:
    """An endpoint as a client connects to it: a wildcard host becomes ``host``."""
    found = WILDCARD_HOST.match(endpoint)
    return f"{found[1]}://{host}{found[3]}" if found else endpoint


def host_of(endpoint: str) -> str:
    """The host of a tcp endpoint (``127.0.0.1`` of ``tcp://127.0.0.1:7000``)."""
    found = re.match(r"^\w+://(\[[^\]]*\]|[^:/]*)", endpoint)
    return found[1] if found and found[1] else "127.0.0.1"


class Routes:
    def __init__(self, placement: Placement, own_endpoints: dict[str, str],
                 topics: Topics) -> None:
        self.placement = placement
        self.topics = topics
        # cluster endpoint -> client endpoints by role (this node's, then the peers')
        self.clients: dict[str, dict[str, str]] = {placement.own: own_endpoints}
        self._disagreed: set[tuple[str, str]] = set()
        self._heard: dict[str, tuple[str, int]] = {}  # topic -> (peer, count), not yet taken
        self._spread = 0  # the next partition a message without a key is offered

    def own_routing(self) -> Routing:
        return Routing(self.clients[self.placement.own], self.partition_counts())

    def partition_counts(self) -> dict[str, int]:
        return {topic.name: topic.partitions for topic in self.topics.topics.values()
                if topic.partitions}

    def learned(self, endpoint: str, routing: Routing) -> None:
        """A peer's ROUTING: where clients reach it, and the partition counts it knows
        (taken by ``adopt``)."""
        self.clients[endpoint] = routing.endpoints
        for name, count in routing.partitions.items():
            known = self.topics.topics.get(name)
            if known is None or known.partitions != count:
                self._heard[name] = (endpoint, count)

    def adopt(self, now_us: int) -> None:
        """Partition counts the peers declared: this node's topics take them (made when
        new, kept in the store); a topic declared otherwise here keeps its own."""
        heard, self._heard = self._heard, {}
        for name, (endpoint, count) in heard.items():
            topic = self.topics.topic(name, now_us)
            if not topic.partitions:
                self.topics.partition(topic, count)
                log.info("partitions_learned", topic=name, partitions=count, peer=endpoint)
            elif topic.partitions != count and (endpoint, name) not in self._disagreed:
                self._disagreed.add((endpoint, name))  # said once per peer and topic
                log.warning("partitions_disagree", topic=name, here=topic.partitions,
                            peer=endpoint, there=count)

    def refusal(self, topic: Topic, key: bytes | None, now: float) -> str | None:
        """None when this node stores the message; else the status that names its
        partition's owner. A message without a key goes to any partition this node
        owns, or is offered to the owners in turn."""
        if not topic.partitions:
            return None
        owners = self.placement.owners(topic.name, topic.partitions, now)
        own = self.placement.own
        if key is not None:
            partition = partition_of(key, topic.partitions)
        elif own in owners:
            return None
        else:
            self._spread += 1
            partition = self._spread % topic.partitions
        owner = owners[partition]
        if owner == own:
            return None
        where = self.clients.get(owner, {}).get("receive", "unknown")
        return f"{MOVED} {topic.name} {partition} {where}"

    def table(self, now: float) -> dict[str, object]:
        """The route table (ROUTES): every node with its state and client endpoints,
        and each partitioned topic's owner per partition (by cluster endpoint)."""
        peers = self.placement.peers
        nodes: dict[str, dict[str, object]] = {}
        for endpoint in self.placement.endpoints:
            if endpoint == self.placement.own:
                state = "self"
            else:
                peer = peers.peers[endpoint] if peers is not None else None
                state = "up" if peer is not None and peer.up else "down"
            nodes[endpoint] = {"state": state, **self.clients.get(endpoint, {})}
        topics = {name: {"partitions": count,
                         "owners": self.placement.owners(name, count, now)}
                  for name, count in sorted(self.partition_counts().items())}
        return {"node": self.placement.own, "nodes": nodes, "topics": topics}
