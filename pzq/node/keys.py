"""A node's CURVE keys from its options, read and checked before anything binds (by the
node, and by the supervisor of ``--shards`` before any shard starts)."""

from __future__ import annotations

import os
import stat

from pzq.logs import get_logger
from pzq.node.config import Config
from pzq.security import (
    NO_CURVE,
    NodeSecurity,
    load_node_curve,
    refuse_unauthorized_shared_key,
)

log = get_logger("pzq.node")


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


def warn_if_others_may_read(secret_key: str | None) -> None:
    """A node's secret key that every user of the host may read (a copy made with
    ``cp``, a ``chmod -R a+r``): its group may (the deploying page gives it to the
    node's group), the others should not. Said once at start; the node runs on."""
    if secret_key is None:
        return
    try:
        mode = os.stat(secret_key).st_mode
    except OSError:
        return  # read already, or its error said
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        log.warning("curve_secret_key_readable_by_others", path=secret_key,
                    mode=f"{stat.S_IMODE(mode):04o}",
                    reason="every user of this host may read the node's secret key: "
                           "chmod o= it (pzq-keygen writes it 0600)")
