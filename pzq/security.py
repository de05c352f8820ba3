"""ZeroMQ CURVE for every socket of a node, with ZAP through pyzmq's authenticator.

A node serves CURVE with the key pair in ``--curve-secret-key`` and admits only
clients whose public keys are in ``--curve-authorized-keys`` (a directory of
public key files as ``pzq-keygen`` writes them). With ``--cluster-authorized-keys``
each node of a cluster has its own key pair: its cluster endpoint admits only the
keys in that directory (a ZAP domain of its own, so a client key cannot join),
and it connects to each peer expecting that peer's key. Without it, the nodes
share one key pair, authorized as clients are. --send-dsn has a ZAP domain of its
own too: its consumers cannot be told apart once connected (a DEALER), so a key
without the right to consume there (pzq.authorization) is refused at its handshake.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from pzq import handshakes
from pzq.errors import ConfigError
from pzq.zap import LoggingAuthenticator
from pzq.zmqio import AnySocket, Context, Socket


@dataclass(frozen=True)
class KeyPair:
    public: bytes
    secret: bytes


class ClientSecurity(Protocol):
    """How a client's socket speaks to a node: CURVE (``ClientCurve``) or in plain
    text (``PLAIN``), applied before it connects."""

    @property
    def on(self) -> bool: ...  # CURVE is on

    def apply(self, socket: AnySocket) -> None: ...


@dataclass(frozen=True)
class ClientCurve:
    """What a client needs: its own key pair and the server's public key."""

    keys: KeyPair
    server_public: bytes
    on: ClassVar[bool] = True

    def apply(self, socket: AnySocket) -> None:
        socket.curve_publickey = self.keys.public
        socket.curve_secretkey = self.keys.secret
        socket.curve_serverkey = self.server_public


class PlainClient:
    """A client without CURVE: its socket is left as it is."""

    on: ClassVar[bool] = False

    def apply(self, socket: AnySocket) -> None:
        pass


PLAIN = PlainClient()


def plain_if_none(curve: ClientSecurity | None) -> ClientSecurity:
    """The clients' public ``curve=None`` (no CURVE, as every client has taken it) as
    the object that says so."""
    return PLAIN if curve is None else curve


def load_key_pair(path: str | Path) -> KeyPair:
    """A secret key file (``NAME.key_secret``) holds both halves of the pair; halves
    that do not belong together would pass for the wrong server key at every
    handshake, so they are refused here."""
    public, secret = _load_certificate(path)
    if secret is None:
        raise ConfigError(f"{path} holds only a public key; give the .key_secret file")
    if not _is_z85_key(secret):
        raise ConfigError(f"cannot read CURVE key file {path}: its secret-key is not 40 "
                          f"characters of Z85 (pzq-keygen writes them)")
    if zmq.curve_public(secret) != public:
        raise ConfigError(f"cannot read CURVE key file {path}: its public-key is not the "
                          f"one of its secret-key (the two lines come from different "
                          f"pairs; pzq-keygen writes them)")
    return KeyPair(public, secret)


def load_public_key(path: str | Path) -> bytes:
    """A public key file (``NAME.key``): a node's secret key file would work as well,
    which puts the node's secret key on every client's host, so it is refused."""
    public, secret = _load_certificate(path)
    if secret is not None:
        raise ConfigError(f"{path} holds a secret key: give the public .key file (a "
                          f"client needs only the node's public key; its secret key "
                          f"stays on the node)")
    return public


def _load_certificate(path: str | Path) -> tuple[bytes, bytes | None]:
    """ConfigError naming the file: pyzmq says 'Invalid certificate file' also for
    one that is not there."""
    try:
        if not Path(path).exists():
            raise ConfigError(f"cannot read CURVE key file {path}: there is no such file")
        if Path(path).is_dir():
            raise ConfigError(f"cannot read CURVE key file {path}: it is a directory")
        public, secret = zmq.auth.load_certificate(str(path))
    except PermissionError:
        # a key copied out as root: the node's own user (pzq) may not read it
        raise ConfigError(f"cannot read CURVE key file {path}: the user {_user()} may not "
                          "read it (permission denied): give it to the user that runs "
                          "this (chown)") from None
    except ValueError:  # pyzmq's words repeat the file's name
        raise ConfigError(f"cannot read CURVE key file {path}: it is not a CURVE key file "
                          f"(no public-key line; pzq-keygen writes them)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc}") from None
    if not _is_z85_key(public):  # libzmq would refuse it later, as a traceback
        raise ConfigError(f"cannot read CURVE key file {path}: its public-key is not 40 "
                          f"characters of Z85 (pzq-keygen writes them)")
    return public, secret


def _user() -> str:
    """This process's user by name (its number where it has none)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def client_curve(client_secret_file: str | None, server_key_file: str | None) -> ClientSecurity:
    """The client side from two key files, or PLAIN when neither is given."""
    if client_secret_file is None and server_key_file is None:
        return PLAIN
    if client_secret_file is None or server_key_file is None:
        raise ConfigError("CURVE needs both the client's secret key and the server's public key")
    return ClientCurve(load_key_pair(client_secret_file), load_public_key(server_key_file))


CLUSTER_DOMAIN = "pzq-cluster"  # the ZAP domain of the cluster endpoint with per-node keys
SEND_DOMAIN = "pzq-send"  # the ZAP domain of --send-dsn: the keys that may consume there
SendGate = Callable[[str], bool]  # a Z85 key admitted as a client -> may it use --send-dsn


def admit_all(key: str) -> bool:
    return True


class Stoppable(Protocol):
    def stop(self) -> None: ...


class NodeSecurity(Protocol):
    """How a node's sockets speak: CURVE (``NodeCurve``) or in plain text (``NO_CURVE``).
    ``serve``, ``serve_send`` and ``serve_cluster`` are applied before a bind,
    ``to_peer`` before the cluster's connects; ``start`` starts what admits the
    clients' keys (ZAP), --send-dsn's those ``send_gate`` admits of them."""

    def serve(self, socket: Socket) -> None: ...

    def serve_send(self, socket: Socket) -> None: ...

    def serve_cluster(self, socket: Socket) -> None: ...

    def to_peer(self, endpoint: str) -> ClientSecurity: ...

    def start(self, context: Context, send_gate: SendGate = admit_all) -> Stoppable: ...


@dataclass(frozen=True)
class NodeCurve:
    """A node's CURVE: its key pair, who may connect as a client, and for the cluster
    either per-node keys (``cluster_keys`` set) or the shared pair."""

    keys: KeyPair
    client_keys: Path
    cluster_keys: Path | None = None
    peer_keys: dict[str, bytes] = field(default_factory=dict)  # endpoint -> public key
    peer_key_names: dict[str, str] = field(default_factory=dict)  # endpoint -> NAME.key

    def read_peer_keys(self) -> dict[str, bytes]:
        """Each peer's key as its ``NAME.key`` in the cluster directory says now
        (ConfigError naming a file that is not there or no key)."""
        if self.cluster_keys is None:
            return {}
        return {endpoint: self._peer_key(endpoint, name)
                for endpoint, name in self.peer_key_names.items()}

    def _peer_key(self, endpoint: str, name: str) -> bytes:
        """A file that is not there says which --nodes entry names it: the node links
        to that peer expecting it, so it stays until the entry goes (a restart)."""
        assert self.cluster_keys is not None
        path = self.cluster_keys / f"{name}.key"
        if not path.exists():
            raise ConfigError(f"--nodes {name}={endpoint} names the peer's key {name}.key, "
                              f"which --cluster-authorized-keys {self.cluster_keys} does not "
                              f"hold: a node in --nodes keeps its key there (take it out of "
                              f"--nodes, with a restart, to withdraw it)")
        return load_public_key(path)

    def renew_peer_keys(self, keys: dict[str, bytes]) -> list[str]:
        """The peers' keys read again (SIGHUP): ``to_peer`` gives them from now on, so
        a link connected again expects the new key. Returns the endpoints whose key
        changed."""
        changed = sorted(endpoint for endpoint, key in keys.items()
                         if self.peer_keys.get(endpoint) != key)
        self.peer_keys.update(keys)
        return changed

    def serve(self, socket: Socket) -> None:
        serve_curve(socket, self.keys)

    def serve_send(self, socket: Socket) -> None:
        serve_curve(socket, self.keys, SEND_DOMAIN)

    def serve_cluster(self, socket: Socket) -> None:
        """The cluster endpoint admits the peers' own keys when nodes have their own."""
        serve_curve(socket, self.keys, CLUSTER_DOMAIN if self.cluster_keys is not None
                    else None)

    def to_peer(self, endpoint: str) -> ClientCurve:
        """What our DEALER to a peer presents, and the server key it expects there."""
        return ClientCurve(self.keys, self.peer_keys.get(endpoint, self.keys.public))

    def start(self, context: Context, send_gate: SendGate = admit_all) -> Stoppable:
        return start_authenticator(context, self, send_gate)


class NothingToStop:
    def stop(self) -> None:
        pass


class NoCurve:
    """A node without --curve-secret-key: every socket in plain text, no ZAP."""

    def serve(self, socket: Socket) -> None:
        pass

    def serve_send(self, socket: Socket) -> None:
        pass

    def serve_cluster(self, socket: Socket) -> None:
        pass

    def to_peer(self, endpoint: str) -> ClientSecurity:
        return PLAIN

    def start(self, context: Context, send_gate: SendGate = admit_all) -> Stoppable:
        return NothingToStop()


NO_CURVE = NoCurve()


def load_node_curve(secret_key: str, client_keys: str, cluster_keys: str | None,
                    peer_key_names: dict[str, str]) -> NodeCurve:
    """Read every key a node needs before it binds anything, failing with the file's name."""
    keys = load_key_pair(secret_key)
    read_key_directory(client_keys, "--curve-authorized-keys")
    if cluster_keys is None:
        return NodeCurve(keys, Path(client_keys))
    read_key_directory(cluster_keys, "--cluster-authorized-keys")
    curve = NodeCurve(keys, Path(client_keys), Path(cluster_keys),
                      peer_key_names=dict(peer_key_names))
    curve.renew_peer_keys(curve.read_peer_keys())
    return curve


def read_key_directory(directory: str | Path, option: str) -> frozenset[bytes]:
    """The public keys (Z85) of the ``*.key`` files in ``directory``, as ZAP reads them,
    or ConfigError naming the file that is not one: pyzmq's authenticator drops the
    whole directory for one bad file (a warning in the log) and refuses every client,
    saying each key is unknown; a line that is no key of 40 characters of Z85 would be
    a key no client ever has."""
    if not Path(directory).is_dir():
        raise ConfigError(f"{option} {directory} is not a directory")
    try:  # a directory that cannot be listed has no file a glob finds: no key, unsaid
        names = sorted(entry.name for entry in os.scandir(directory))
    except OSError as exc:
        raise ConfigError(f"cannot read {option} {directory}: {exc.strerror}") from None
    keys = set()
    for path in (Path(directory) / name for name in names
                 if name.endswith(".key") and not name.startswith(".")):  # as a glob
        try:
            public, _ = zmq.auth.load_certificate(path)
        except OSError as exc:
            raise ConfigError(f"{option} {directory}: cannot read {path.name}: "
                              f"{exc.strerror or exc}") from None
        except ValueError:
            raise ConfigError(f"{option} {directory}: {path.name} is not a CURVE public key "
                              f"file (no public-key line; pzq-keygen writes them)") from None
        if not _is_z85_key(public):
            raise ConfigError(f"{option} {directory}: {path.name} is not a CURVE public key "
                              f"file (its public-key is not 40 characters of Z85; "
                              f"pzq-keygen writes them)")
        keys.add(public)
    return frozenset(keys)


def _is_z85_key(key: bytes) -> bool:
    return len(key) == 40 and all(char in z85.Z85CHARS for char in key)


def serve_curve(socket: Socket, keys: KeyPair, zap_domain: str | None = None) -> None:
    socket.curve_publickey = keys.public
    socket.curve_secretkey = keys.secret
    socket.curve_server = True
    handshakes.watch(socket)
    if zap_domain is not None:
        socket.zap_domain = zap_domain.encode()


def start_authenticator(context: Context, curve: NodeCurve,
                        send_gate: SendGate = admit_all) -> ThreadAuthenticator:
    if not curve.client_keys.is_dir():
        raise ConfigError(f"--curve-authorized-keys {curve.client_keys} is not a directory")
    authenticator = LoggingAuthenticator(context, send_domain=SEND_DOMAIN,
                                         cluster_domain=CLUSTER_DOMAIN, send_gate=send_gate)
    authenticator.start()
    admit_keys(authenticator, read_key_directory(curve.client_keys, "--curve-authorized-keys"),
               None if curve.cluster_keys is None
               else read_key_directory(curve.cluster_keys, "--cluster-authorized-keys"))
    return authenticator


def admit_keys(authenticator: ThreadAuthenticator, client_keys: frozenset[bytes],
               cluster_keys: frozenset[bytes] | None) -> None:
    """What ZAP admits from now on, as pyzmq's configure_curve sets it (its table of
    Z85 keys a domain), from keys read once: the same read that was checked, where
    configure_curve would read the directory again. Each domain's table is replaced
    whole, which the ZAP thread sees at its next handshake."""
    admitted = dict.fromkeys(client_keys, True)
    authenticator.allow_any = False
    authenticator.certs["*"] = admitted
    authenticator.certs[SEND_DOMAIN] = dict(admitted)
    if cluster_keys is not None:
        authenticator.certs[CLUSTER_DOMAIN] = dict.fromkeys(cluster_keys, True)


def key_pair_paths(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Where ``generate`` writes the public and the secret key of ``name``."""
    return Path(directory) / f"{name}.key", Path(directory) / f"{name}.key_secret"


def generate(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``NAME.key`` (public, to authorize) and ``NAME.key_secret`` (keep private)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(directory), name)
    Path(secret).chmod(0o600)
    return Path(public), Path(secret)


def admitted_keys(directory: str | None) -> frozenset[str] | None:
    """The public keys (Z85) in ``--curve-authorized-keys``; None without it, or when
    it cannot be read (the node's start says why)."""
    if directory is None or not Path(directory).is_dir():
        return None
    try:
        return frozenset(key.decode() for key in zmq.auth.load_certificates(directory))
    except (OSError, ValueError):
        return None


def refuse_unauthorized_shared_key(curve: NodeCurve, secret_key: str | Path, who: str) -> None:
    """Nodes sharing one key pair (no --cluster-authorized-keys) connect to each other
    with it, so each must admit its public key; without it they never join, and say
    so only as refused handshakes. ``who`` names the nodes (``the shards``)."""
    if curve.cluster_keys is not None:
        return
    directory = curve.client_keys
    if not directory.is_dir():
        raise ConfigError(f"--curve-authorized-keys {directory} is not a directory")
    try:
        admitted = zmq.auth.load_certificates(str(directory))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the keys in --curve-authorized-keys {directory}: "
                          f"{exc}") from None
    if curve.keys.public in admitted:
        return
    secret = Path(secret_key)
    public = secret.with_suffix(".key") if secret.suffix == ".key_secret" else None
    copy = f"copy {public} there" if public is not None else "copy its public key there"
    raise ConfigError(f"the public key of --curve-secret-key {secret} is not in "
                      f"--curve-authorized-keys {directory}, and {who} connect to each other "
                      f"with that key pair: they would never join; {copy}")
