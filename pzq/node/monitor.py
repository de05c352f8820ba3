"""Answers to monitor socket commands, built from a snapshot of the node's figures."""

from __future__ import annotations

import json
from typing import Any

# The original pzq's MONITOR keys come first, in its order; more follow.
MONITOR_KEYS = ("messages", "messages_inflight", "db_size", "inflight_db_size", "syncs",
                "expired_messages")
COMMANDS = (b"MONITOR", b"STATS", b"PING", b"DEAD", b"REQUEUE", b"PURGE", b"PENDING")


def answer(command: bytes, snapshot: dict[str, Any]) -> bytes:
    if command == b"MONITOR":
        return monitor_text(snapshot)
    if command == b"STATS":
        return json.dumps(snapshot, sort_keys=True).encode()
    if command == b"PING":
        return b"PONG"
    known = ", ".join(name.decode() for name in COMMANDS)
    shown = command[:40].decode(errors="replace")
    return f"ERROR: unknown command {shown!r}; known commands: {known}".encode()


def monitor_text(snapshot: dict[str, Any]) -> bytes:
    """``key: value`` lines, the original's keys first, nested figures left out."""
    lines = [f"{key}: {snapshot[key]}" for key in MONITOR_KEYS]
    for key, value in snapshot.items():
        if key not in MONITOR_KEYS and isinstance(value, (int, float, str)):
            lines.append(f"{key}: {value}")
    return ("\n".join(lines) + "\n").encode()


def parse_monitor_text(text: bytes) -> dict[str, str]:
    """The inverse of monitor_text, for tools and tests."""
    figures = {}
    for line in text.decode().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            figures[key] = value
    return figures
