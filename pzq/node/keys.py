"""A node's CURVE keys from its options, read and checked before anything binds (by the
node, and by the supervisor of ``--shards`` before any shard starts)."""

from __future__ import annotations

from pzq.node.config import Config
from pzq.security import (
    NO_CURVE,
    NodeSecurity,
    load_node_curve,
    refuse_unauthorized_shared_key,
)


def node_curve(config: Config, who: str = "the cluster's nodes") -> NodeSecurity:
    """NO_CURVE without --curve-secret-key. A node with peers that shares its key pair
    with them must admit that key (``who`` names the nodes in the error)."""
    if config.curve_secret_key is None or config.curve_authorized_keys is None:
        return NO_CURVE
    curve = load_node_curve(config.curve_secret_key, config.curve_authorized_keys,
                            config.cluster_authorized_keys, config.peer_key_names)
    if config.nodes:
        refuse_unauthorized_shared_key(curve, config.curve_secret_key, who)
    return curve
