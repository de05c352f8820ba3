"""A tool's duration takes its unit: a plain number is microseconds to the node but
seconds to the tools' --timeout, so ``pzq-ctl group declare ... --ack-timeout 30`` made
a 30 µs ack timeout (every delivery expired at once) and ``pzq-produce --ttl 3600`` a
message expiring within 4 ms, both accepted without a word."""

from __future__ import annotations

import pytest

from pzq.durations import duration_us
from tests.unit.test_negative_values import PARSERS, parse_error

GROUP = ["group", "declare", "orders", "g"]
TOPIC = ["topic", "declare", "orders"]
# each tool's option that hands a duration on to the node (before it: the words it needs)
DURATION_OPTIONS = [
    ("pzq-produce", [], "--delay"),
    ("pzq-produce", [], "--ttl"),
    ("pzq-ctl", GROUP, "--ack-timeout"),
    ("pzq-ctl", GROUP, "--backoff"),
    ("pzq-ctl", TOPIC, "--max-age"),
    ("pzq-ctl", TOPIC, "--dedup-window"),
]


@pytest.mark.parametrize("prog, before, option", DURATION_OPTIONS)
@pytest.mark.parametrize("plain", ["30", "3600"])
def test_a_plain_number_is_refused_with_the_unit_to_give(prog, before, option, plain):
    said = parse_error(PARSERS[prog](), [*before, option, plain])
    assert said.count("\n") == 1 and said.startswith(prog), said
    assert f"argument {option}: {plain} has no unit: give one, e.g. {plain}s" in said


@pytest.mark.parametrize("prog, before, option", DURATION_OPTIONS)
@pytest.mark.parametrize("text, words", [
    ("soon", "soon is not a duration: give a number with a unit: 250ms, 5s, 2m, 1h, 2d"),
    ("1.5", "1.5 has no unit: give one, e.g. 1.5s"),
])
def test_a_refused_duration_asks_for_what_the_tool_takes(prog, before, option, text, words):
    """The node's words offered plain microseconds ('give microseconds (5000000) or a
    number with a unit'), which the tool then refused ('has no unit'); 1.5 was 'would
    be microseconds, which are whole'."""
    said = parse_error(PARSERS[prog](), [*before, option, text])
    assert f"argument {option}: {words}" in said and "microseconds (" not in said, said


@pytest.mark.parametrize("argv", [
    ["--delay", "0"], ["--delay", "30s"], ["--ttl", "5000000us"], ["--ttl", "250ms"]])
def test_a_unit_or_zero_is_taken(argv):
    assert parse_error(PARSERS["pzq-produce"](), argv) == ""


@pytest.mark.parametrize("steps", ["1s,,10s", "1s,", ",1s"])
def test_a_backoff_with_an_empty_step_is_refused(steps):
    # it was declared without the empty step: a step the writer meant, lost
    said = parse_error(PARSERS["pzq-ctl"](), [*GROUP, "--backoff", steps])
    assert f"argument --backoff: {steps}: give 1 to 32 durations separated by ','" in said


def test_a_step_of_a_backoff_takes_its_unit_too():
    said = parse_error(PARSERS["pzq-ctl"](), [*GROUP, "--backoff", "1s,30"])
    assert "argument --backoff: 30 has no unit" in said
    assert parse_error(PARSERS["pzq-ctl"](), [*GROUP, "--backoff", "1s,30s"]) == ""


@pytest.mark.parametrize("prog, before, option", DURATION_OPTIONS)
@pytest.mark.parametrize("huge", ["36601d", "99999999999999d"])
def test_a_duration_past_a_century_is_refused_as_the_node_refuses_it(prog, before, option,
                                                                      huge):
    """99999999999999d went on as 8639999999999913698000896 µs (a float's digits), or
    8.639999999999914e+18 s in pzq-produce's error."""
    said = parse_error(PARSERS[prog](), [*before, option, huge])
    assert said.count("\n") == 1 and said.startswith(prog), said
    assert f"argument {option}: {huge} must be at most 36600d (a century)" in said


def test_a_century_is_taken():
    assert parse_error(PARSERS["pzq-produce"](), ["--delay", "36600d"]) == ""
    assert parse_error(PARSERS["pzq-ctl"](), [*GROUP, "--ack-timeout", "36600d"]) == ""


@pytest.mark.parametrize("text, exact", [
    ("99999999999999d", 99_999_999_999_999 * 86_400_000_000),
    ("1.1s", 1_100_000), ("0.1ms", 100), ("0.0000015s", 2), ("0.0000005s", 0),
    ("123456789012345678901234567890.5us", 123456789012345678901234567890),
])
def test_a_duration_is_read_exactly(text, exact):
    assert duration_us(text) == exact
