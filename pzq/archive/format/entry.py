"""An archived message: the record ``[key][metadata][part 1..N]`` and its metadata.

``acked_us`` is when the consumer ACKed it, or for a dead letter (``outcome``
``dead_letter``) when it was given up. ``headers``, only when the message had any
besides TOPIC: the producer's header frames as sent (TAG, KEY, DEDUP-ID, and the
time headers, ``DELAY:30000``, ``TTL:600000``, ``PRIORITY:9`` ..., read against
``stored_us``; ``times`` picks those out).

Metadata is one compact JSON object, small and self-describing, so that readers in
any language (and Spark) can use it without this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from pzq.errors import ArchiveFormatError
from pzq.protocol.time_headers import time_headers_of

# A JSON string as json.dumps writes it (ASCII, quoted): the C function it calls.
json_string: Callable[[str], str] = encode_basestring_ascii
METADATA_FIELDS: dict[str, type] = {
    "topic": str, "msg_id": str, "stored_us": int, "first_delivered_us": int,
    "acked_us": int, "deliveries": int, "origin": str, "outcome": str}
KIND_NAMES = {str: "a string", int: "an integer"}
# The metadata object as json.dumps writes it (ASCII, no spaces), fields in this order.
METADATA = ('{"topic":%s,"msg_id":%s,"stored_us":%d,"first_delivered_us":%d,"acked_us":%d,'
            '"deliveries":%d,"origin":%s,"outcome":%s%s}')


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
    groups: tuple[str, ...] = ()  # consumer groups done with it, when not only default
    # the producer's header frames but its TOPIC (in ``topic``), when it gave others: a
    # replay delivers them as produced (TAG, KEY, ...)
    headers: tuple[bytes, ...] = ()

    @property
    def times(self) -> tuple[str, ...]:
        """Its time headers as produced, as text (pzq.protocol.time_headers)."""
        return time_headers_of(self.headers)

    def frames(self) -> list[bytes]:
        return [self.key, metadata_json(
            json_string(self.topic), self.msg_id, self.stored_us, self.first_delivered_us,
            self.acked_us, self.deliveries, json_string(self.origin),
            json_string(self.outcome), optional_fields(self.groups, self.headers)),
            *self.parts]

    @classmethod
    def from_metadata(cls, key: bytes, meta: dict[str, Any],
                      parts: tuple[bytes, ...]) -> ArchivedMessage:
        """From a key, metadata checked by ``parse_metadata`` and the parts."""
        return cls(key, meta["msg_id"].encode("latin-1"), meta["topic"], meta["stored_us"],
                   meta["first_delivered_us"], meta["acked_us"], meta["deliveries"],
                   meta["origin"], parts, meta.get("outcome", "acked"),
                   tuple(str(group) for group in meta.get("groups", ())),
                   tuple(str(header).encode("latin-1", errors="replace")
                         for header in meta.get("headers", ())))


def metadata_json(quoted_topic: str, msg_id: bytes, stored_us: int, first_delivered_us: int,
                  acked_us: int, deliveries: int, quoted_origin: str, quoted_outcome: str,
                  optional: str) -> bytes:
    """The metadata frame: what ``json.dumps`` with separators ``,`` and ``:`` writes of
    the fields in this order (the quoted strings as ``json_string`` gives them,
    ``optional`` as ``optional_fields`` does), with one format operation: the
    archive's bulk writes quote the strings of a whole ACK once (and write this
    function out, pzq.archive.tier.acked_records)."""
    return (METADATA % (quoted_topic, json_string(msg_id.decode("latin-1")), stored_us,
                        first_delivered_us, acked_us, deliveries, quoted_origin,
                        quoted_outcome, optional)).encode()


def optional_fields(groups: tuple[str, ...], headers: tuple[bytes, ...]) -> str:
    """The metadata's ``groups`` and ``headers``, each only when there are any."""
    fields = ""
    if groups:
        fields += ',"groups":' + json_list(groups)
    if headers:
        fields += ',"headers":' + json_list([header.decode("latin-1") for header in headers])
    return fields


def json_list(items: list[str] | tuple[str, ...]) -> str:
    return "[" + ",".join(map(json_string, items)) + "]"


def parse_metadata(payload: bytes, at: int = 0) -> dict[str, Any]:
    """pzq's metadata object from a record's second frame (found at byte ``at``)."""
    try:
        meta = json.loads(payload)
    except UnicodeDecodeError as exc:
        raise ArchiveFormatError("record metadata is not UTF-8", at + exc.start) from None
    except json.JSONDecodeError as exc:
        bad = at + len(exc.doc[:exc.pos].encode())
        raise ArchiveFormatError(f"record metadata is not JSON ({exc.msg})", bad) from None
    if not isinstance(meta, dict):
        raise ArchiveFormatError("record metadata is not a JSON object", at)
    for name, kind in METADATA_FIELDS.items():
        value = meta.get(name, "acked" if name == "outcome" else None)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ArchiveFormatError(f"record metadata lacks {name!r} ({KIND_NAMES[kind]})",
                                     at)
    try:
        meta["msg_id"].encode("latin-1")
    except UnicodeEncodeError:
        raise ArchiveFormatError("record metadata has a msg_id beyond latin-1", at) from None
    return meta
