"""The CURVE key directories read again on SIGHUP, as a broker's users are added and
removed without a restart: the signal's handler only asks, the loop reads them at the
wake it causes. A key added to ``--curve-authorized-keys`` (or the cluster's directory)
gets in at its next handshake, a key removed is refused at its next one. ZAP sees only
handshakes: a connection made before stays until it reconnects (the --authorization
rules, read per message, cut it off: ``Authorizing.readmit``). A directory with
a file that is no key is refused with one line and the keys in force stay.
"""

from __future__ import annotations

from zmq.auth.thread import ThreadAuthenticator

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

    def attach(self, security: NodeSecurity, authenticator: object,
               has_peers: bool = False) -> None:
        """The node's ZAP, once started (``run``). ``has_peers``: the node has --nodes
        (with a shared key pair, its own key must stay admitted)."""
        if isinstance(security, NodeCurve) and isinstance(authenticator, ThreadAuthenticator):
            self._curve, self._authenticator = security, authenticator
            self._has_peers = has_peers
            self.client_keys, self.cluster_keys = self._read(security)
            self._warn_if_nobody_admitted()

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
        self.client_keys, self.cluster_keys = client_keys, cluster_keys
        self._warn_if_nobody_admitted()
        return True

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
