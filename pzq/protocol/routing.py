"""What a node tells its peers about where clients reach it (ROUTING, see
pzq.protocol.cluster), so that every node can answer the route table (ROUTES).

A JSON object ``{"endpoints": {role: endpoint}, "partitions": {topic: count},
"protocol": version}``:
- ``endpoints``: the node's client endpoints as a client connects to them, by role:
  ``receive`` (producers), ``send`` (the original consumers), ``consume`` (consumer
  groups, absent when off) and ``monitor``;
- ``partitions``: each partitioned topic the node knows, with its partition count;
- ``protocol``: the cluster protocol the node speaks (``CLUSTER_PROTOCOL``: the frame
  layouts of pzq.protocol.cluster, counted). A node of a release before versions
  sends none: it speaks protocol 1.

Readers ignore keys they do not know, so a node of a release before versions reads
the frames of this one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pzq.errors import DecodeError
from pzq.protocol.headers import validate_topic

ROLES = ("receive", "send", "consume", "monitor")
# Protocol 1: the frames of the releases before versions. Protocol 2: the same frames,
# and ROUTING says the protocol. Protocol 3: SCHEDULE copies scheduled messages.
# Protocol 4: LEAVING, a node's last frame as it stops by SIGTERM. Protocol 5: RESTORED,
# the seqs a node restored from a backup lost. Protocol 6: RESTORED_KEPT, a peer's answer
# that it keeps them on disk.
CLUSTER_PROTOCOL = 6
UNVERSIONED_PROTOCOL = 1


@dataclass(frozen=True)
class Routing:
    endpoints: dict[str, str] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    protocol: int = CLUSTER_PROTOCOL

    def encode(self) -> bytes:
        return json.dumps({"endpoints": self.endpoints, "partitions": self.partitions,
                           "protocol": self.protocol}, sort_keys=True).encode()


def decode_routing(blob: bytes) -> Routing:
    try:
        found: Any = json.loads(blob)
    except ValueError:
        raise DecodeError("ROUTING is not JSON") from None
    if not isinstance(found, dict):
        raise DecodeError("ROUTING is not a JSON object")
    endpoints, partitions = found.get("endpoints", {}), found.get("partitions", {})
    if not isinstance(endpoints, dict) or not all(
            role in ROLES and isinstance(endpoint, str) for role, endpoint in endpoints.items()):
        raise DecodeError("ROUTING endpoints must map a role to an endpoint")
    if not isinstance(partitions, dict):
        raise DecodeError("ROUTING partitions must map a topic to a count")
    for topic, count in partitions.items():
        try:
            validate_topic(topic)
        except ValueError as exc:
            raise DecodeError(f"ROUTING: {exc}") from None
        if type(count) is not int or count < 1:
            raise DecodeError(f"ROUTING: topic {topic} has no partition count")
    protocol = found.get("protocol", UNVERSIONED_PROTOCOL)
    if type(protocol) is not int or protocol < 1:
        raise DecodeError("ROUTING protocol must be a whole number from 1")
    return Routing(dict(endpoints), dict(partitions), protocol)
