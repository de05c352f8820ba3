"""The messages of one ACK as archive records, each topic's end to end for one write.

The records are byte for byte what ``ArchivedMessage.frames`` gives one by one (the
same metadata writer and frame encoder); only what is the same for the whole ACK (its
time, origin, outcome) or for every message with the same headers or groups (the
topic, the headers' and groups' JSON) is worked out once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pzq.archive.format.codec import encode_frames_into
from pzq.archive.format.entry import json_string, metadata_json, optional_fields
from pzq.delivery.inflight import InFlight
from pzq.protocol.headers import TOPIC_HEADER
from pzq.protocol.message_keys import message_key
from pzq.store import record

ACKED = json_string("acked")


@dataclass
class TopicRecords:
    """One topic's records, end to end, where each starts, and their messages' seqs."""

    data: bytearray = field(default_factory=bytearray)
    starts: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)


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
        for entry, names in zip(entries, groups, strict=True):
            stored_us, _, _, msg_id, headers, parts = record.fields(entry.value)
            about = self._by_headers.get(headers) or self._about(headers)
            topic_records, quoted_topic, headers_json = about
            groups_json = self._groups_json.get(names)
            if groups_json is None:
                groups_json = self._groups_json[names] = optional_fields(names, ())
            metadata = metadata_json(quoted_topic, msg_id, stored_us, entry.first_delivered_us,
                                     self.acked_us, entry.deliveries, self.quoted_origin,
                                     ACKED, groups_json + headers_json)
            topic_records.starts.append(len(topic_records.data))
            topic_records.seqs.append(entry.seq)
            encode_frames_into(topic_records.data,
                               [message_key(self.origin, entry.seq), metadata, *parts])

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
