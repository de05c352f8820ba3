"""PINGs from a node that names itself by a cluster endpoint this node's --nodes does
not list: its frames are refused (``cluster_rejected``), and that node sees this one
unreachable, every ACK it owes saying REPLICATION_FAILED. The usual cause is one node
written two ways (``tcp://localhost:P`` in --nodes, ``tcp://127.0.0.1:P`` as its
--broadcast-dsn): said as a warning, once a minute for each endpoint, not per frame."""

from __future__ import annotations

from pzq.logs import get_logger

log = get_logger("pzq.cluster")

REPEAT_S = 60.0
MOST_REMEMBERED = 1024  # endpoints a flood of names could make: forgotten past this


class Strangers:
    def __init__(self) -> None:
        self._said: dict[str, float] = {}  # endpoint -> when it was last said (monotonic)

    def pinged(self, endpoint: str, node_id: bytes, nodes: tuple[str, ...], now: float,
               own_id: bytes = b"") -> None:
        """``own_id``: this node's id; a PING that carries it is this node's own, come
        back through a --nodes entry that reaches this node under another name."""
        last = self._said.get(endpoint)
        if last is not None and now - last < REPEAT_S:
            return
        if len(self._said) >= MOST_REMEMBERED:
            self._said.clear()
        self._said[endpoint] = now
        if own_id and node_id == own_id:
            log.warning("nodes_list_this_node", endpoint=endpoint[:200], nodes=",".join(nodes))
            return
        log.warning("ping_from_stranger", endpoint=endpoint[:200],
                    node_id=node_id.decode(errors="replace")[:40], nodes=",".join(nodes))
