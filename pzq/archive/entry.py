"""An archived message: the record ``[key][metadata][part 1..N]`` and its metadata.

``acked_us`` is when the consumer ACKed it, or for a dead letter (``outcome``
``dead_letter``) when it was given up.

Metadata is one compact JSON object, small and self-describing, so that readers in
any language (and Spark) can use it without this module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pzq.errors import ArchiveFormatError

TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")


def validate_topic(name: str) -> str:
    """A topic is a directory name: letters, digits, '.', '_', '-', not starting with '.'."""
    if not TOPIC_PATTERN.fullmatch(name):
        raise ValueError(f"topic {name[:40]!r} must be 1-255 of A-Z a-z 0-9 . _ - "
                         "and not start with '.'")
    return name


@dataclass(frozen=True)
class ArchivedMessage:
    key: bytes
    msg_id: bytes
    topic: str
    stored_us: int
    first_delivered_us: int
    acked_us: int
    deliveries: int
    origin: str
    parts: tuple[bytes, ...]
    outcome: str = "acked"  # or "dead_letter": given up after --max-deliveries

    def frames(self) -> list[bytes]:
        metadata = {"topic": self.topic, "msg_id": self.msg_id.decode("latin-1"),
                    "stored_us": self.stored_us, "first_delivered_us": self.first_delivered_us,
                    "acked_us": self.acked_us, "deliveries": self.deliveries,
                    "origin": self.origin, "outcome": self.outcome}
        return [self.key, json.dumps(metadata, separators=(",", ":")).encode(), *self.parts]

    @classmethod
    def from_frames(cls, frames: list[bytes], offset: int = 0) -> ArchivedMessage:
        if len(frames) < 2:
            raise ArchiveFormatError("record has no metadata frame", offset)
        try:
            meta = json.loads(frames[1])
            return cls(frames[0], meta["msg_id"].encode("latin-1"), meta["topic"],
                       int(meta["stored_us"]), int(meta["first_delivered_us"]),
                       int(meta["acked_us"]), int(meta["deliveries"]), meta["origin"],
                       tuple(frames[2:]), meta.get("outcome", "acked"))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ArchiveFormatError("record metadata is not pzq's JSON", offset) from None
