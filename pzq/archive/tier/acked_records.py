"""The messages of one ACK as archive records, each topic's end to end for one write.

The records are byte for byte what ``ArchivedMessage.frames`` gives one by one (the
same metadata format and frame encoding); only what is the same for the whole ACK
(its time, origin, outcome) or for every message with the same headers or groups
(the topic, the headers' and groups' JSON) is worked out once, and no function is
called per message but those of C (the records read in one pass, the keys made in
one map, the frames encoded in one pass per topic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

from pzq.archive.format.codec import encode_records
from pzq.archive.format.entry import METADATA, json_string, optional_fields
from pzq.delivery.inflight import InFlight
from pzq.protocol.headers import TOPIC_HEADER
from pzq.protocol.message_keys import message_keys
from pzq.store import record

ACKED = json_string("acked")
SEQ_OF, VALUE_OF = attrgetter("seq"), attrgetter("value")  # of entries, in C


@dataclass
class TopicRecords:
    """One topic's records (each its frames) and their messages' seqs."""

    records: list[list[bytes]] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)

    def encoded(self) -> tuple[bytearray, list[int]]:
        """The records end to end, and where each starts."""
        return encode_records(self.records)


class AckedRecords:
    def __init__(self, topic_of: Callable[[tuple[bytes, ...]], str], origin: bytes,
                 acked_us: int) -> None:
        self.topic_of = topic_of  # the archive's topic for a message's headers
        self.origin = origin
        self.acked_us = acked_us
        self.quoted_origin = json_string(origin.decode())
        self.by_topic: dict[str, TopicRecords] = {}
        # by headers: the topic's records, its quoted name, the headers' JSON
        self._by_headers: dict[tuple[bytes, ...], tuple[TopicRecords, str, str]] = {}
        self._groups_json: dict[tuple[str, ...], str] = {}

    def add_all(self, entries: list[InFlight], groups: list[tuple[str, ...]]) -> None:
        """Each entry's message (its stored record) with the groups done with it."""
        keys = message_keys(self.origin, list(map(SEQ_OF, entries)))
        fields = record.fields_all(list(map(VALUE_OF, entries)))
        by_headers, groups_jsons = self._by_headers, self._groups_json
        acked_us, quoted_origin = self.acked_us, self.quoted_origin
        for entry, names, key, (stored_us, _, _, msg_id, headers, parts) in zip(
                entries, groups, keys, fields, strict=True):
            topic_records, quoted_topic, headers_json = (by_headers.get(headers)
                                                         or self._about(headers))
            groups_json = groups_jsons.get(names)
            if groups_json is None:
                groups_json = groups_jsons[names] = optional_fields(names, ())
            # pzq.archive.format.entry.metadata_json, written out
            metadata = (METADATA % (quoted_topic, json_string(msg_id.decode("latin-1")),
                                    stored_us, entry.first_delivered_us, acked_us,
                                    entry.deliveries, quoted_origin, ACKED,
                                    groups_json + headers_json)).encode()
            topic_records.records.append([key, metadata, *parts])
            topic_records.seqs.append(entry.seq)

    def _about(self, headers: tuple[bytes, ...]) -> tuple[TopicRecords, str, str]:
        """For messages with these headers: their topic's records, its quoted name, and
        the headers' JSON (but TOPIC's, which the topic says)."""
        topic = self.topic_of(headers)
        topic_records = self.by_topic.get(topic)
        if topic_records is None:
            topic_records = self.by_topic[topic] = TopicRecords()
        others = tuple(header for header in headers if header[:6].upper() != TOPIC_HEADER)
        about = self._by_headers[headers] = (topic_records, json_string(topic),
                                             optional_fields((), others))
        return about
