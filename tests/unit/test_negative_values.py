"""A negative value given as a user writes it (``--ack-timeout -1s``) reaches its option's
check, which refuses it in its own words, as ``--ack-timeout=-1s`` does: argparse took it
for an option and said only "expected one argument"."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable, Iterator

import pytest

from pzq.archive import tool as archive_tool
from pzq.cli import bench, consume, ctl, keygen, monitor, produce
from pzq.monitoring import exporter
from pzq.node import main as node_main

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "pzq": node_main.make_argument_parser,
    "pzq-archive": archive_tool.make_argument_parser,
    "pzq-bench": bench.make_argument_parser,
    "pzq-consume": consume.make_argument_parser,
    "pzq-ctl": ctl.make_argument_parser,
    "pzq-exporter": exporter.make_argument_parser,
    "pzq-keygen": keygen.make_argument_parser,
    "pzq-monitor": monitor.make_argument_parser,
    "pzq-produce": produce.make_argument_parser,
}


def valued_options(parser: argparse.ArgumentParser,
                   before: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each option that takes one value and checks it (its ``type``), with the words
    that come before it (a subcommand's name)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from valued_options(sub, (*before, name))
        elif action.option_strings and action.nargs is None and action.type is not None:
            yield before, action.option_strings[-1]


def parse_error(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """What the parser says on stderr about ``argv`` ('' when it takes it)."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.suppress(SystemExit):
        parser.parse_args(argv)
    return said.getvalue()


CASES = [(prog, before, option) for prog, make in PARSERS.items()
         for before, option in valued_options(make())]


def test_every_tool_has_options_that_take_numbers():
    assert {prog for prog, _, _ in CASES} >= {"pzq", "pzq-consume", "pzq-ctl", "pzq-monitor"}
    assert len(CASES) > 60


@pytest.mark.parametrize("prog, before, option", CASES)
@pytest.mark.parametrize("value", ["-1s", "-1", "-0.5", "-250ms", "-.5s"])
def test_a_negative_value_reaches_its_option(prog, before, option, value):
    parser = PARSERS[prog]()
    said = parse_error(parser, [*before, option, value])
    assert "expected one argument" not in said
    # as the same value after '=' does, word for word
    assert said == parse_error(PARSERS[prog](), [*before, f"{option}={value}"])


@pytest.mark.parametrize("prog, argv, refusal", [
    ("pzq-consume", ["--timeout", "-1s"],
     "argument --timeout: -1s: give a number of seconds greater than 0"),
    ("pzq-consume", ["--timeout", "-1 fortnight"],
     "argument --timeout: -1 fortnight is not a number of seconds or a number with a unit"),
    ("pzq-consume", ["--timeout", "-2"],
     "argument --timeout: -2: give a number of seconds greater than 0"),
    ("pzq-consume", ["--count", "-3"], "argument --count: -3: give a whole number 0 or more"),
    ("pzq-ctl", ["--timeout", "-1s", "pending"],
     "argument --timeout: -1s: give a number of seconds greater than 0"),
    ("pzq", ["--ack-timeout", "-1 parsecs"],
     "argument --ack-timeout: -1 parsecs is not a duration"),
])
def test_the_refusal_is_the_options_own(prog, argv, refusal):
    said = parse_error(PARSERS[prog](), argv)
    assert said.splitlines() == [f"{prog}: error: {said.split(': error: ')[1].strip()}"]
    assert refusal in said


@pytest.mark.parametrize("text, seconds", [("3", 3.0), ("1.5", 1.5), ("3s", 3.0),
                                           ("250ms", 0.25), ("2m", 120.0), ("1.5s", 1.5)])
def test_a_tools_seconds_take_a_unit_as_the_nodes_durations_do(text, seconds):
    # a plain number stays seconds (the tools' SECONDS); a unit as the node's options
    args = PARSERS["pzq-consume"]().parse_args(["--timeout", text])
    assert args.timeout == seconds
