"""What reads one node's topics, as that node tells the holders of its copies (TOPICS).

A JSON object ``{"default_topic": name, "default_from": {topic: seq or null},
"groups": {topic: [{"name": .., "start_seq": .., "filter": ..}, ..]}}``:
- ``default_topic``: the origin's topic for messages without ``TOPIC``;
- ``default_from``: each topic the group ``default`` does not read in full (null:
  none of it; a seq: from that seq on);
- ``default_unclaimed`` (optional): the topics of which ``default`` holds only the
  messages no named group holds (a reader that predates it keeps such copies for
  ``default`` too: longer than needed, never too short);
- ``groups``: the origin's named groups per topic; a group holds a message of its
  topic at or past its start seq whose tag its filter takes.

Readers ignore keys they do not know, and a frame without ``groups`` (from a node
that predates them) names none, so a takeover then serves ``default`` only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pzq.errors import DecodeError

DEFAULT_GROUP = "default"


@dataclass(frozen=True)
class GroupReads:
    """One named group of the origin: where it starts and what its filter takes."""

    name: str
    start_seq: int = 0
    filter: str = ""  # "": every tag; "eu-*": tags starting with "eu-"; else that tag
    delivered_below: int = 0  # how far its first deliveries went (see DeliveryState)

    def holds(self, seq: int, tag: bytes) -> bool:
        if seq < self.start_seq:
            return False
        if not self.filter:
            return True
        wanted = self.filter.encode()
        return tag.startswith(wanted[:-1]) if wanted.endswith(b"*") else tag == wanted


@dataclass(frozen=True)
class DefaultReads:
    """Who reads one node's topics: ``default`` every message but those of the topics
    in ``default_from`` below the seq given (None: none of them), and the named groups
    of each topic in ``groups``."""

    default_topic: str = DEFAULT_GROUP
    default_from: dict[str, int | None] = field(default_factory=dict)
    groups: dict[str, tuple[GroupReads, ...]] = field(default_factory=dict)
    delivered_below: int = 0  # how far ``default``'s first deliveries went
    unclaimed: tuple[str, ...] = ()  # ``default`` holds what no named group holds

    def holders(self, topic: str, seq: int, tag: bytes) -> list[str]:
        """Names of the groups holding message ``seq`` of ``topic`` tagged ``tag``."""
        held = [group.name for group in self.groups.get(topic, ()) if group.holds(seq, tag)]
        start = self.default_from.get(topic, 0)
        if start is None:  # ``default`` does not read the topic
            return held
        if not held or (topic not in self.unclaimed and seq >= start):
            held.append(DEFAULT_GROUP)
        return held

    def group(self, topic: str, name: str) -> GroupReads | None:
        return next((group for group in self.groups.get(topic, ()) if group.name == name),
                    None)

    def encode(self) -> bytes:
        groups = {topic: [{"name": group.name, "start_seq": group.start_seq,
                           "filter": group.filter, "delivered_below": group.delivered_below}
                          for group in found]
                  for topic, found in self.groups.items()}
        return json.dumps({"default_topic": self.default_topic,
                           "default_from": self.default_from, "groups": groups,
                           "delivered_below": self.delivered_below,
                           **({"default_unclaimed": list(self.unclaimed)}
                              if self.unclaimed else {})},
                          sort_keys=True).encode()


def _seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def decode_default_reads(blob: bytes) -> DefaultReads:
    try:
        found = json.loads(blob)
    except (ValueError, UnicodeDecodeError):
        raise DecodeError("TOPICS is not JSON") from None
    if not isinstance(found, dict) or not isinstance(found.get("default_topic"), str) \
            or not isinstance(found.get("default_from"), dict):
        raise DecodeError("TOPICS needs default_topic and default_from")
    starts = found["default_from"]
    for name, start in starts.items():
        if start is not None and not _seq(start):
            raise DecodeError(f"TOPICS default_from of {name[:40]!r} is not a seq or null")
    unclaimed = found.get("default_unclaimed", [])
    if not isinstance(unclaimed, list) or not all(isinstance(name, str) for name in unclaimed):
        raise DecodeError("TOPICS default_unclaimed is not a list of topics")
    return DefaultReads(found["default_topic"], starts, _decode_groups(found.get("groups", {})),
                        _delivered_below(found, "TOPICS"), tuple(unclaimed))


def _delivered_below(found: dict[str, Any], what: str) -> int:
    """Optional: a node from before delivery counts were kept does not say it."""
    delivered = found.get("delivered_below", 0)
    if not _seq(delivered):
        raise DecodeError(f"{what} delivered_below is not a seq")
    return int(delivered)


def _decode_groups(found: Any) -> dict[str, tuple[GroupReads, ...]]:
    if not isinstance(found, dict):
        raise DecodeError("TOPICS groups is not an object of topics")
    groups = {}
    for topic, listed in found.items():
        if not isinstance(listed, list):
            raise DecodeError(f"TOPICS groups of {topic[:40]!r} is not a list")
        groups[topic] = tuple(_decode_group(topic, item) for item in listed)
    return groups


def _decode_group(topic: str, item: Any) -> GroupReads:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
            or not _seq(item.get("start_seq")) or not isinstance(item.get("filter", ""), str):
        raise DecodeError(f"TOPICS group of {topic[:40]!r} needs a name, a start_seq and "
                          "a filter")
    return GroupReads(item["name"], item["start_seq"], item.get("filter", ""),
                      _delivered_below(item, f"TOPICS group of {topic[:40]!r}"))
