"""The time headers (pzq.protocol.time_headers): what the node reads of them, what it
refuses naming the header, and what the clients make of their arguments."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta, timezone

import pytest

from pzq.cli.common import moment_us
from pzq.protocol.consume import start_of
from pzq.protocol.time_headers import NO_TIMES, MessageTimes, message_times, time_headers

NOW = 1_700_000_000_000_000


def test_a_message_without_time_headers_has_none():
    assert message_times([b"TOPIC:orders", b"TAG:eu", b"KEY:7"], NOW) is NO_TIMES


@pytest.mark.parametrize("headers, times", [
    ([b"DELAY:1500"], MessageTimes(NOW + 1_500_000, 0, 0)),
    ([b"not-before:1800000000000000"], MessageTimes(1_800_000_000_000_000, 0, 0)),
    ([b"TTL:60000", b"PRIORITY:9"], MessageTimes(0, NOW + 60_000_000, 9)),
    ([b"EXPIRES:1800000000000000", b"DELAY:0"], MessageTimes(NOW, 1_800_000_000_000_000, 0)),
    ([b"PRIORITY:1", b"PRIORITY:4"], MessageTimes(0, 0, 4)),  # the last one counts
    ([b"PRIORITY:0007", b"DELAY:00"], MessageTimes(NOW, 0, 7)),  # leading zeros
])
def test_times_are_absolute_from_when_the_node_stores_the_message(headers, times):
    assert message_times(headers, NOW) == times


@pytest.mark.parametrize("header, reason", [
    (b"DELAY:soon", "DELAY:soon is not a whole number of milliseconds"),
    (b"DELAY:-5", "DELAY:-5 is not a whole number of milliseconds"),
    (b"DELAY:", "DELAY: is not a whole number of milliseconds"),
    (b"DELAY:9999999999999999", "DELAY:9999999999999999 is out of range: give 0 to "
                                "3162240000000 (milliseconds)"),
    (b"NOT-BEFORE:2026-12-01", "NOT-BEFORE:2026-12-01 is not a whole number of µs since "
                               "the epoch"),
    (b"TTL:0", "TTL:0 is out of range: give 1 to 3162240000000 (milliseconds)"),
    (b"EXPIRES:1.5", "EXPIRES:1.5 is not a whole number of µs since the epoch"),
    (b"EXPIRES:999999999999999999", "EXPIRES:999999999999999999 is out of range: give 0 "
                                    "to 253402300799999999 (µs since the epoch)"),
    (b"PRIORITY:10", "PRIORITY:10 is out of range: give 0 to 9 (a priority)"),
    (b"PRIORITY:high", "PRIORITY:high is not a whole number from 0 to 9 (a priority)"),
    (b"PRIORITY:-1", "PRIORITY:-1 is not a whole number from 0 to 9 (a priority)"),
    # a whole number too long for the limit is out of range, however many digits it has
    (b"DELAY:" + b"9" * 23, "DELAY:" + "9" * 23 + " is out of range: give 0 to "
                           "3162240000000 (milliseconds)"),
    (b"PRIORITY:" + b"1" * 5000, "PRIORITY:" + "1" * 40 + " is out of range: give 0 to 9 "
                                 "(a priority)"),
])
def test_a_bad_value_is_refused_naming_its_header(header, reason):
    with pytest.raises(ValueError) as refused:
        message_times([b"TOPIC:orders", header], NOW)
    assert str(refused.value) == reason


@pytest.mark.parametrize("headers, reason", [
    ([b"DELAY:5", b"NOT-BEFORE:5"], "DELAY and NOT-BEFORE both given: give one"),
    ([b"TTL:5", b"EXPIRES:5"], "TTL and EXPIRES both given: give one"),
])
def test_both_of_a_pair_are_refused(headers, reason):
    with pytest.raises(ValueError, match=reason):
        message_times(headers, NOW)


def test_the_clients_make_the_frames_the_node_reads():
    moment = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    frames = time_headers(delay=30, ttl=0.5, priority=9)
    assert frames == [b"DELAY:30000", b"TTL:500", b"PRIORITY:9"]
    assert time_headers(not_before=moment, expires=1_800_000_000_000_000) == [
        b"NOT-BEFORE:1796115600000000", b"EXPIRES:1800000000000000"]
    # another zone counts as itself
    assert time_headers(not_before=moment) == \
        time_headers(not_before=moment.astimezone(timezone(timedelta(hours=2))))
    assert message_times(time_headers(not_before=moment), NOW).due_us == 1_796_115_600_000_000
    assert time_headers() == []


@pytest.mark.parametrize("options, reason", [
    ({"priority": 10}, "priority must be a whole number from 0 to 9"),
    ({"priority": True}, "priority must be a whole number from 0 to 9"),
    ({"delay": -1}, "delay must be from 0 s to a century"),
    ({"ttl": 0}, "ttl must be from 0.001 s to a century"),
    ({"not_before": datetime(1969, 1, 1, tzinfo=UTC)}, "not_before must be a time from"),
    # not numbers: Python's own TypeError, ValueError or OverflowError; "5" was 5 µs
    ({"delay": float("nan")}, "delay must be a number of seconds from 0 s to a century"),
    ({"ttl": float("inf")}, "ttl must be a number of seconds from 0.001 s to a century"),
    ({"delay": "5"}, "delay must be a number of seconds"),
    ({"not_before": "5"}, "not_before must be a time from 1970 to 9999, got '5'"),
    # naive: Python's local time (datetime.now()) or a program's UTC (utcnow())? Hours
    # early or late, silently, either way
    ({"not_before": datetime(2030, 1, 1)}, "not_before is a datetime without a time zone "
                                           r"\(2030-01-01T00:00:00\): give it one"),
    ({"expires": datetime(2030, 1, 1, 9, 30)}, "expires is a datetime without a time zone"),
    ({"expires": float("nan")}, "expires must be a time from 1970 to 9999"),
    # a pair the node refuses: refused before sending too, as pzq-produce does
    ({"delay": 1, "not_before": 5}, "delay and not_before both given: give one"),
    ({"ttl": 1, "expires": 5}, "ttl and expires both given: give one"),
])
def test_the_clients_refuse_what_the_node_would(options, reason):
    with pytest.raises(ValueError, match=reason):
        time_headers(**options)


def test_a_time_as_text_without_a_zone_is_utc_and_a_naive_datetime_is_refused():
    """The tools' text (``--not-before``, ``--start``) and a GroupConsumer's ``start``
    read ISO 8601 without a zone as UTC; a datetime object without one is refused
    wherever the Python clients take a time, as in time_headers."""
    utc_us = 1_796_115_600_000_000  # 2026-12-01T09:00:00Z
    assert moment_us("2026-12-01T09:00:00") == moment_us("2026-12-01T10:00:00+01:00") == utc_us
    assert start_of("2026-12-01T09:00:00") == start_of(datetime(2026, 12, 1, 9, tzinfo=UTC)) \
        == utc_us
    with pytest.raises(ValueError, match="start is a datetime without a time zone"):
        start_of(datetime(2026, 12, 1, 9))


def test_a_tools_time_out_of_range_is_said_so_not_called_no_time():
    with pytest.raises(argparse.ArgumentTypeError, match="1960-01-01 is out of range: give a "
                                                         "time from 1970 to 9999"):
        moment_us("1960-01-01")
    with pytest.raises(argparse.ArgumentTypeError, match="tomorrow is not a time"):
        moment_us("tomorrow")
