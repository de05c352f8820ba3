"""Rewriting the endpoint a cluster node names in its PING, in a live ZMTP stream.

A node's PING (``[PING, node id, endpoint]``) names its own --broadcast-dsn, and
the receiving node accepts it only if that endpoint is in its --nodes. Through a
proxy, the receiving node knows the sender by the proxy endpoint it connects to,
so the proxy replaces the endpoint frame. The stream from a DEALER is a ZMTP 3
greeting (64 bytes) followed by frames: a flags byte (MORE 0x01, LONG 0x02,
COMMAND 0x04), the size in 1 byte or, when LONG, 8 bytes big-endian, the body.
"""

from __future__ import annotations

import struct

ZMTP_GREETING = 64
ZMTP_MORE, ZMTP_LONG, ZMTP_COMMAND = 0x01, 0x02, 0x04
PING = b"PING"


def encode_zmtp_frame(flags: int, body: bytes) -> bytes:
    if len(body) > 255:
        return bytes([flags | ZMTP_LONG]) + struct.pack(">Q", len(body)) + body
    return bytes([flags & ~ZMTP_LONG, len(body)]) + body


class PingRewriter:
    """Copies a ZMTP 3 stream from a DEALER, replacing the endpoint of each PING."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.encode()
        self._pending = bytearray()
        self._greeting_left = ZMTP_GREETING
        self._message: list[tuple[int, bytes]] = []  # frames of the message being read

    def feed(self, data: bytes) -> bytes:
        """Bytes in, the bytes to forward out (whole frames only, once past the greeting)."""
        out = bytearray()
        if self._greeting_left:
            taken = data[:self._greeting_left]
            self._greeting_left -= len(taken)
            out += taken
            data = data[len(taken):]
        self._pending += data
        while (frame := self._next_frame()) is not None:
            out += self._frame_out(*frame)
        return bytes(out)

    def _next_frame(self) -> tuple[int, bytes] | None:
        buffer = self._pending
        if len(buffer) < 2:
            return None
        flags = buffer[0]
        if flags & ZMTP_LONG:
            if len(buffer) < 9:
                return None
            (size,) = struct.unpack_from(">Q", buffer, 1)
            start = 9
        else:
            size, start = buffer[1], 2
        if len(buffer) < start + size:
            return None
        body = bytes(buffer[start:start + size])
        del buffer[:start + size]
        return flags, body

    def _frame_out(self, flags: int, body: bytes) -> bytes:
        if flags & ZMTP_COMMAND:
            return encode_zmtp_frame(flags, body)
        self._message.append((flags, body))
        if flags & ZMTP_MORE:
            return b""
        message, self._message = self._message, []
        if len(message) == 3 and message[0][1] == PING:
            message[2] = (message[2][0], self.endpoint)
        return b"".join(encode_zmtp_frame(f, b) for f, b in message)
