"""The text a node answers MONITOR with: ``key: value`` lines, the original pzq's
keys first. The node writes it, the clients and tools read it back."""

from __future__ import annotations

from typing import Any

# The original pzq's MONITOR keys come first, in its order; more follow.
MONITOR_KEYS = ("messages", "messages_inflight", "db_size", "inflight_db_size", "syncs",
                "expired_messages")


def monitor_text(snapshot: dict[str, Any]) -> bytes:
    """``key: value`` lines, the original's keys first, nested figures left out."""
    lines = [f"{key}: {snapshot[key]}" for key in MONITOR_KEYS]
    for key, value in snapshot.items():
        if key not in MONITOR_KEYS and isinstance(value, (int, float, str)):
            lines.append(f"{key}: {value}")
    return ("\n".join(lines) + "\n").encode()


def messages(count: int) -> str:
    """``1 message``, ``n messages``: a count in the answers' words."""
    return "1 message" if count == 1 else f"{count} messages"


def parse_monitor_text(text: bytes) -> dict[str, str]:
    """The inverse of monitor_text, for tools and tests."""
    figures = {}
    for line in text.decode().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            figures[key] = value
    return figures
