"""groups.rst, "Groups beside Redis Streams, JetStream, Kafka and RabbitMQ": a user
moving from Redis Streams or JetStream finds each operation of theirs in the table,
with pzq's word for it. XGROUP DESTROY and DELCONSUMER, XINFO STREAM, XADD's MAXLEN
trimming, JetStream's stream limits and discard policy and a consumer's deliver
policy were in none of its rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.page_tables import parsed

PAGE = Path(__file__).parents[2] / "docs" / "groups.rst"
RULE = re.compile(r"^=+(  +=+)+$")
REDIS = ["XADD MAXLEN", "MINID", "XREADGROUP", "XACK", "XPENDING", "XCLAIM", "XAUTOCLAIM",
         "XGROUP CREATE", "XGROUP SETID", "XGROUP DELCONSUMER", "XGROUP DESTROY",
         "XINFO GROUPS", "XINFO STREAM"]
JETSTREAM = ["ack_wait", "max_deliver", "backoff", "NAK with delay", "TERM", "+WPI",
             "max_ack_pending", "DeliverPolicy", "by start time", "by start sequence",
             "max_msgs", "max_bytes", "max_age", "discard"]


def table_text() -> str:
    text = PAGE.read_text()
    section = text[text.index(".. _groups-beside-peers:"):
                   text.index(".. _beside-kafka-rabbitmq:")]
    lines = section.splitlines()
    rules = [n for n, line in enumerate(lines) if RULE.match(line)]
    return "\n".join(lines[rules[0]:rules[-1] + 1])


def rows() -> list[list[str]]:
    """Each row's cells, a cell's lines joined: a line whose first cell is empty goes
    on the row above, as the docs build reads a simple table."""
    table = table_text().splitlines()
    spans = [match.span() for match in re.finditer(r"=+", table[0])]
    spans[-1] = (spans[-1][0], 10_000)  # the last column may run past its rule
    found: list[list[str]] = []
    for line in table[3:-1]:
        cells = [line[start:end].strip() for start, end in spans]
        if cells[0] or not found:
            found.append(cells)
        else:
            found[-1] = [f"{old} {new}".strip() for old, new in zip(found[-1], cells, strict=True)]
    return found


def test_the_table_parses_as_the_docs_build_parses_it():
    parsed(re.sub(r":(ref|doc):`([^`]+)`", r"\2", table_text()))


@pytest.mark.parametrize("column, word", [(1, word) for word in REDIS]
                         + [(2, word) for word in JETSTREAM])
def test_each_operation_has_a_row_with_pzqs_word(column, word):
    matching = [row for row in rows() if word in row[column].replace("``", "")]
    assert matching, f"no row of the table names {word}"
    assert all(row[3] and row[3] != "no" for row in matching), matching


def test_the_delivery_count_row_says_it_needs_delivery_headers():
    (row,) = [row for row in rows() if row[0] == "delivery count"]
    assert "--delivery-headers" in row[3]


def test_max_ack_pending_is_told_apart_from_a_consumers_window():
    """JetStream's max_ack_pending caps the whole consumer (pzq's group); a window is
    one connection's, and the row gave it as the same thing."""
    (row,) = [row for row in rows() if "max_ack_pending" in row[2]]
    assert "whole consumer" in row[2] and "no cap" in row[3], row
