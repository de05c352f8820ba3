"""ZAP for a CURVE node: pyzmq's authenticator, with refused handshakes in the node's log
(those of clients without CURVE, which never reach ZAP, through pzq.handshakes).

A refused client retries its handshake about ten times a second, so a refusal is logged
once per client key and then at most every ``REPEAT_EVERY_S`` seconds, with how many
refusals went unlogged in between. pyzmq's own stdlib log records (warnings and
errors: malformed ZAP requests) are forwarded into structlog.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from pzq import logs
from pzq.handshakes import HandshakeWatch

log = logs.get_logger("pzq.zap")
UNKNOWN = b"Unknown key"  # pyzmq's reason for a key in no file of the domain's directory
UNKNOWN_CLIENT = b"Unknown key: not in --curve-authorized-keys"
UNKNOWN_PEER = (b"Unknown key: not in --cluster-authorized-keys (not a node of this "
                b"cluster)")
REPEAT_EVERY_S = 10.0
MAX_REMEMBERED = 1024  # distinct refused clients remembered for the rate limit


class RefusalLog:
    """Rate-limits the ``handshake_refused`` event per (address, client key)."""

    def __init__(self, now: Any = time.monotonic) -> None:
        self._now = now
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (logged at, unlogged)
        self._lock = threading.Lock()  # told by the ZAP thread and the handshake watch

    def refused(self, address: str, mechanism: str, client_key: str, reason: str,
                endpoint: str = "") -> None:
        with self._lock:
            self._refused(address, mechanism, client_key, reason, endpoint)

    def _refused(self, address: str, mechanism: str, client_key: str, reason: str,
                 endpoint: str) -> None:
        now = self._now()
        who = (address or endpoint, client_key)
        logged_at, unlogged = self._last.get(who, (None, 0))
        if logged_at is not None and now - logged_at < REPEAT_EVERY_S:
            self._last[who] = (logged_at, unlogged + 1)
            return
        if len(self._last) >= MAX_REMEMBERED:
            self._last.clear()
        self._last[who] = (now, 0)
        where = {"endpoint": endpoint} if endpoint else {}
        log.info("handshake_refused", address=address, mechanism=mechanism,
                 client_key=client_key, reason=reason, refused_since_last_logged=unlogged,
                 **where)


class LoggingAuthenticator(ThreadAuthenticator):
    """pyzmq's thread authenticator that logs every refused handshake (rate-limited).
    In ``send_domain`` a key admitted as a client must also pass ``send_gate`` (the
    right to consume on --send-dsn: pzq.authorization)."""

    def __init__(self, *args: Any, send_domain: str = "", cluster_domain: str = "",
                 send_gate: Callable[[str], bool] = lambda key: True, **kwargs: Any) -> None:
        kwargs.setdefault("log", _forwarding_logger())
        super().__init__(*args, **kwargs)
        self.send_domain = send_domain
        self.cluster_domain = cluster_domain
        self.send_gate = send_gate
        self.refusals = RefusalLog()
        self._request: tuple[str, str, str] = ("", "", "")
        # Clients without CURVE never reach ZAP: their sockets' monitors tell.
        self.handshakes = HandshakeWatch(self.context, self.refusals.refused)

    def start(self) -> None:
        super().start()
        self.handshakes.start()

    def stop(self) -> None:
        self.handshakes.stop()
        super().stop()

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        # Remember who asks: the reply, where the verdict is known, does not say.
        if len(msg) >= 6:
            address = msg[3].decode(errors="replace")
            mechanism = msg[5].decode(errors="replace")
            key = z85.encode(msg[6]).decode() if mechanism == "CURVE" and len(msg) > 6 \
                and len(msg[6]) == 32 else ""
            self._request = (address, mechanism, key)
        await super().handle_zap_message(msg)

    async def _authenticate_curve(self, domain: str, client_key: bytes) -> tuple[bool, bytes]:
        allowed, reason = await super()._authenticate_curve(domain, client_key)
        if reason == UNKNOWN:  # which directory: a peer's key belongs in the cluster's
            reason = UNKNOWN_PEER if domain and domain == self.cluster_domain \
                else UNKNOWN_CLIENT
        if allowed and domain and domain == self.send_domain \
                and not self.send_gate(z85.encode(client_key).decode()):
            return False, b"FORBIDDEN consume *:default (--send-dsn)"
        return allowed, reason

    def _send_zap_reply(self, request_id: bytes, status_code: bytes, status_text: bytes,
                        user_id: str = "anonymous") -> None:
        if status_code != b"200":
            address, mechanism, key = self._request
            self.refusals.refused(address, mechanism, key, status_text.decode(errors="replace"))
        super()._send_zap_reply(request_id, status_code, status_text, user_id)


class _ToStructlog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        log.warning("zap_problem", message=record.getMessage())


def _forwarding_logger() -> logging.Logger:
    logger = logging.getLogger("pzq.zap.pyzmq")
    logger.setLevel(logging.WARNING)  # pyzmq logs every request at debug
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(_ToStructlog())
    return logger
