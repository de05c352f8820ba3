"""Raw ZPER records: topics written by ZPER producers through the node's ZPWriter.

A raw record is the frames a producer sent, stored as they are (ZPER's own format),
so it has no key and no metadata (pzq.archive.format.records walks it as a
RawRecord). A topic holds either pzq's records or raw ones, never both: the writer
marks a topic it creates with a RAW_MARKER file, refuses a topic that holds pzq's
records, and the node archives an acked message whose ``TOPIC:`` header names a raw
topic under ``--archive-topic`` instead.
"""

from __future__ import annotations

from pathlib import Path

RAW_MARKER = "zper-writer.topic"


def is_raw_topic(directory: Path) -> bool:
    return (directory / RAW_MARKER).exists()


def mark_raw(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RAW_MARKER).touch()
