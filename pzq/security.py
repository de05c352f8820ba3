"""ZeroMQ CURVE for every socket of a node, with ZAP through pyzmq's authenticator.

A node serves CURVE with the key pair in ``--curve-secret-key`` and admits only
clients whose public keys are in ``--curve-authorized-keys`` (a directory of
public key files as ``pzq-keygen`` writes them). Nodes of one cluster share one
server key pair; each node's own public key must be authorized on the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from pzq.errors import ConfigError
from pzq.zap import LoggingAuthenticator
from pzq.zmqio import Context, Socket


@dataclass(frozen=True)
class KeyPair:
    public: bytes
    secret: bytes


@dataclass(frozen=True)
class ClientCurve:
    """What a client needs: its own key pair and the server's public key."""

    keys: KeyPair
    server_public: bytes

    def apply(self, socket: Socket) -> None:
        socket.curve_publickey = self.keys.public
        socket.curve_secretkey = self.keys.secret
        socket.curve_serverkey = self.server_public


def load_key_pair(path: str | Path) -> KeyPair:
    """A secret key file (``NAME.key_secret``) holds both halves of the pair."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc}") from None
    if secret is None:
        raise ConfigError(f"{path} holds only a public key; give the .key_secret file")
    return KeyPair(public, secret)


def load_public_key(path: str | Path) -> bytes:
    try:
        return zmq.auth.load_certificate(str(path))[0]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read CURVE key file {path}: {exc}") from None


def client_curve(client_secret_file: str | None, server_key_file: str | None) -> ClientCurve | None:
    """The client side from two key files, or None when neither is given."""
    if client_secret_file is None and server_key_file is None:
        return None
    if client_secret_file is None or server_key_file is None:
        raise ConfigError("CURVE needs both the client's secret key and the server's public key")
    return ClientCurve(load_key_pair(client_secret_file), load_public_key(server_key_file))


def serve_curve(socket: Socket, keys: KeyPair) -> None:
    socket.curve_publickey = keys.public
    socket.curve_secretkey = keys.secret
    socket.curve_server = True


def start_authenticator(context: Context, authorized_keys: str | Path) -> ThreadAuthenticator:
    if not Path(authorized_keys).is_dir():
        raise ConfigError(f"--curve-authorized-keys {authorized_keys} is not a directory")
    authenticator = LoggingAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=str(authorized_keys))
    return authenticator


def key_pair_paths(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Where ``generate`` writes the public and the secret key of ``name``."""
    return Path(directory) / f"{name}.key", Path(directory) / f"{name}.key_secret"


def generate(directory: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``NAME.key`` (public, to authorize) and ``NAME.key_secret`` (keep private)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(directory), name)
    Path(secret).chmod(0o600)
    return Path(public), Path(secret)
