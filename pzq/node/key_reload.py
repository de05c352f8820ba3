"""The CURVE key directories read again on SIGHUP, as a broker's users are added and
removed without a restart: the signal's handler only asks, the loop reads them at the
wake it causes. A key added to ``--curve-authorized-keys`` (or the cluster's directory)
gets in at its next handshake, a key removed is refused at its next one. ZAP sees only
handshakes and no socket says which key a connection came with, so a reload that
removes a key cuts every connection of the endpoints that admitted it
(pzq.connection_cut): the clients of the keys kept connect again, the removed key's
are refused (what a cut connection sent before it went is still read: the
--authorization rules, read per message, refuse it, ``Authorizing.readmit``). A
directory with a file that is no key is refused with one line and the keys in force
stay.
"""

from __future__ import annotations

from zmq.auth.thread import ThreadAuthenticator

from pzq.connection_cut import cut_accepted
from pzq.errors import ConfigError
from pzq.logs import get_logger
from pzq.security import NodeCurve, NodeSecurity, admit_keys, read_key_directory

log = get_logger("pzq.node")


class KeyDirectories:
    """What a node's ZAP admits, read again when asked. Nothing to read without CURVE."""

    def __init__(self) -> None:
        self._curve: NodeCurve | None = None
        self._authenticator: ThreadAuthenticator | None = None
        self._asked = False
        self._has_peers = False
        self.client_keys: frozenset[bytes] = frozenset()
        self.cluster_keys: frozenset[bytes] = frozenset()
        # the bound endpoints (name: endpoint) whose connections a removed key may hold
        self._client_endpoints: dict[str, str] = {}
        self._cluster_endpoints: dict[str, str] = {}

    def attach(self, security: NodeSecurity, authenticator: object,
               has_peers: bool = False) -> None:
        """The node's ZAP, once started (``run``). ``has_peers``: the node has --nodes
        (with a shared key pair, its own key must stay admitted)."""
        if isinstance(security, NodeCurve) and isinstance(authenticator, ThreadAuthenticator):
            self._curve, self._authenticator = security, authenticator
            self._has_peers = has_peers
            self.client_keys, self.cluster_keys = self._read(security)
            self._warn_if_nobody_admitted()

    def serve_at(self, bound: dict[str, str], cluster: str) -> None:
        """The node's bound endpoints (name: endpoint, as node_ready says them), once
        bound; ``cluster`` names the cluster's, which admits the peers' keys (their own
        directory's, or with a shared key pair the clients')."""
        self._client_endpoints = {name: endpoint for name, endpoint in bound.items()
                                  if name != cluster}
        self._cluster_endpoints = {name: endpoint for name, endpoint in bound.items()
                                   if name == cluster}

    def ask_reload(self) -> None:  # a signal handler's: only sets a flag
        self._asked = True

    def admitted(self) -> frozenset[str]:
        """The client keys admitted now, in Z85 (as ZAP's User-Id gives them)."""
        return frozenset(key.decode() for key in self.client_keys)

    def reload_if_asked(self) -> bool:
        """The directories read again when asked; False when not asked, or refused."""
        if not self._asked:
            return False
        self._asked = False
        curve, authenticator = self._curve, self._authenticator
        if curve is None or authenticator is None:
            return False
        try:
            client_keys, cluster_keys = self._read(curve)
            peer_keys = curve.read_peer_keys()
            if self._has_peers and curve.cluster_keys is None \
                    and curve.keys.public not in client_keys:
                raise ConfigError(f"--curve-authorized-keys {curve.client_keys} no longer "
                                  "holds this node's own public key, with which the "
                                  "cluster's nodes connect to each other (they share one "
                                  "key pair): put it back")
        except ConfigError as exc:
            log.error("curve_keys_reload_refused", error=str(exc),
                      kept=f"{len(self.client_keys)} client keys, "
                           f"{len(self.cluster_keys)} cluster keys")
            return False
        admit_keys(authenticator, client_keys,
                   None if curve.cluster_keys is None else cluster_keys)
        removed = self.client_keys - client_keys
        # a link to a peer whose key changed expects the new one at its next connect
        # (pzq.cluster.links: a link that gets no answer connects again)
        rekeyed = curve.renew_peer_keys(peer_keys)
        log.info("curve_keys_reloaded", directory=str(curve.client_keys),
                 client_keys=len(client_keys), added=_z85(client_keys - self.client_keys),
                 removed=_z85(removed),
                 **({} if curve.cluster_keys is None else {
                     "cluster_keys": len(cluster_keys),
                     "cluster_added": _z85(cluster_keys - self.cluster_keys),
                     "cluster_removed": _z85(self.cluster_keys - cluster_keys),
                     "peers_rekeyed": rekeyed}))
        cluster_removed = self.cluster_keys - cluster_keys
        self.client_keys, self.cluster_keys = client_keys, cluster_keys
        # with a shared key pair the cluster endpoint admits the client keys
        self._cut_off(removed, cluster_removed if curve.cluster_keys is not None else removed,
                      own_cluster_keys=curve.cluster_keys is not None)
        self._warn_if_nobody_admitted()
        return True

    def _cut_off(self, removed: frozenset[bytes], cluster_removed: frozenset[bytes],
                 own_cluster_keys: bool) -> None:
        """Every connection of an endpoint that admitted a removed key is cut, ZAP now
        refusing that key: the others connect again (ZeroMQ), the removed key's do not.
        ``cluster_removed``: the keys the cluster endpoint no longer admits."""
        endpoints = {**(self._client_endpoints if removed else {}),
                     **(self._cluster_endpoints if cluster_removed else {})}
        if not endpoints:
            return
        cut = cut_accepted(endpoints)
        log.info("curve_connections_cut", removed=len(removed),
                 **({"cluster_removed": len(cluster_removed)} if own_cluster_keys else {}),
                 connections=sum(cut.values()), by_endpoint=cut)

    def _warn_if_nobody_admitted(self) -> None:
        """An empty directory (or one of files without the .key ending) starts a node
        that refuses every client: say so, at start and at each reload."""
        if not self.client_keys and self._curve is not None:
            log.warning("curve_admits_nobody", directory=str(self._curve.client_keys),
                        reason="no NAME.key file in --curve-authorized-keys: every "
                               "client's handshake is refused (copy each client's public "
                               "NAME.key there, then reload)")

    @staticmethod
    def _read(curve: NodeCurve) -> tuple[frozenset[bytes], frozenset[bytes]]:
        client_keys = read_key_directory(curve.client_keys, "--curve-authorized-keys")
        if curve.cluster_keys is None:
            return client_keys, frozenset()
        return client_keys, read_key_directory(curve.cluster_keys, "--cluster-authorized-keys")


def _z85(keys: frozenset[bytes]) -> list[str]:
    return sorted(key.decode() for key in keys)
