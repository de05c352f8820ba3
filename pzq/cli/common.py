"""What every command-line client shares: one-line errors, defaults in --help, endpoints, CURVE."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from fractions import Fraction

import zmq

from pzq import reach, security
from pzq.durations import CENTURY, CENTURY_US, DurationError, duration_us
from pzq.durations import EXAMPLES as DURATION_EXAMPLES
from pzq.errors import ConfigError, DecodeError
from pzq.node.config_checks import DSN_PATTERN
from pzq.protocol import consume as consume_wire
from pzq.protocol.time_headers import epoch_us, iso_moment
from pzq.security import ClientSecurity
from pzq.sockets import dual_stack
from pzq.store.topic_model import validate_name
from pzq.tool_base import ToolParser
from pzq.tool_base import whole_number as whole_number  # the tools import it from here

DEFAULT_MONITOR = "ipc:///tmp/pzq-monitor"  # the quick-start node's monitor


def endpoint(text: str) -> str:
    """An argparse type: a ZeroMQ endpoint a client can connect to."""
    if not DSN_PATTERN.match(text):
        raise argparse.ArgumentTypeError(
            f"{text} is not a ZeroMQ endpoint such as tcp://127.0.0.1:11131 or ipc:///tmp/pzq")
    address = reach.tcp_address(text)
    if text.startswith("tcp://") and (address is None or not 0 < address[1] < 65536):
        raise argparse.ArgumentTypeError(
            f"{text} needs a host and a port from 1 to 65535, e.g. tcp://127.0.0.1:11131")
    problem = _connect_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"cannot connect to {text}: {problem}")
    return text


def _connect_problem(dsn: str) -> str | None:
    """What ZeroMQ says against connecting to ``dsn`` (it checks the form, not the peer).

    The probe is a PUB socket: no pzq socket pairs with it, so should it reach the node
    before it is closed, the handshake fails and no delivery is ever sent to it. A tcp
    endpoint is checked with port 0, where no process listens (its port is checked
    apart): on the node's port it reached the node at every run of a tool, and a CURVE
    node logged each as a refused handshake (the client closed the connection).
    """
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    dual_stack(socket, dsn)
    try:
        socket.connect(_unlistened(dsn))
    except zmq.ZMQError as exc:
        return zmq.strerror(exc.errno or 0)
    finally:
        socket.close()
    return None


def _unlistened(dsn: str) -> str:
    """``dsn`` with its tcp port 0: the same form to check, no process to reach."""
    if not dsn.startswith("tcp://") or reach.tcp_address(dsn) is None:
        return dsn
    return dsn.rpartition(":")[0] + ":0"


def positive_number(unit: str, per_second: float | None = None) -> Callable[[str], float]:
    """An argparse type: a number of ``unit`` (seconds, minutes) greater than 0. With
    ``per_second`` (units in a second), also a number with a unit of time, as the
    node's options take them (``250ms``, ``5s``, ``2m``)."""
    units = "" if per_second is None else " or a number with a unit: 250ms, 5s, 2m"

    def read(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            if per_second is None:
                raise
            return duration_us(text) / 1_000_000 * per_second  # (DurationError: a ValueError)

    def parse(text: str) -> float:
        try:
            value = read(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a number of {unit}{units}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text}: give a number of {unit} greater than 0")
        return value

    return parse


positive_seconds = positive_number("seconds", per_second=1)
positive_minutes = positive_number("minutes")


def name_of(kind: str) -> Callable[[str], str]:
    """An argparse type: a topic's or a group's name, checked here as the node checks it
    (an empty one, or one with a space, reached the node as a command it could not parse
    and came back as the monitor's usage line)."""

    def parse(text: str) -> str:
        try:
            return validate_name(kind, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def start_position(text: str) -> str:
    """An argparse type: where a new group starts, as the node reads it (earliest,
    latest, µs since the epoch); an ISO 8601 time in µs, read as ``group seek --to``
    reads one (``moment_us``)."""
    try:
        consume_wire.decode_start(text)
        return text
    except DecodeError:
        pass
    try:
        if not text.isdigit():  # (whole digits the node refuses are no time either)
            return str(moment_us(text))
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text} is not earliest, latest or a time (ISO 8601, e.g. 2026-12-01T09:00:00Z, "
        "or µs since the epoch)")


TOOL_DURATION_EXAMPLES = "a number with a unit: 250ms, 5s, 2m, 1h, 2d"


def _tool_duration_us(text: str) -> int:
    """A tool's duration in µs, its unit required: a plain number is microseconds to the
    node but seconds to the tools' --timeout, so ``--ack-timeout 30`` (30 µs) or
    ``--delay 30`` is refused rather than read as either (0 needs none); at most a
    century, as the node takes."""
    plain = text.strip()
    if plain.replace(".", "", 1).isdigit():
        if Fraction(plain) == 0:
            return 0
        raise argparse.ArgumentTypeError(
            f"{text} has no unit: give one, e.g. {plain}s, {plain}ms or "
            f"{plain}m (a plain number would be microseconds)")
    try:
        value = duration_us(text)
    except DurationError as exc:
        # the node's words offer plain microseconds, which a tool refuses (above)
        raise argparse.ArgumentTypeError(
            str(exc).replace(DURATION_EXAMPLES, TOOL_DURATION_EXAMPLES)) from None
    if value > CENTURY_US:  # as the node refuses it (and a time header, in seconds)
        raise argparse.ArgumentTypeError(f"{text} must be at most {CENTURY}")
    return value


def positive_duration(text: str) -> str:
    """An argparse type: a duration above 0 with its unit (``10m``, ``5000000us``),
    passed on as given."""
    value = _tool_duration_us(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: give a duration above 0")
    return text


def duration_or_none(text: str) -> str:
    """An argparse type: a duration above 0 with its unit, or 0 (``0s``...) for none,
    passed on as given (0 as ``0``, the node's word for none)."""
    return "0" if _tool_duration_us(text) == 0 else positive_duration(text)


def seconds_of_duration(text: str) -> float:
    """An argparse type: a duration from 0 with its unit (``30s``, ``10m``, ``2d``), in
    seconds."""
    value = _tool_duration_us(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: give a duration from 0")
    return value / 1e6


def moment_us(text: str) -> int:
    """An argparse type: a time, ISO 8601 (``2026-12-01T09:00:00Z``; without a zone:
    UTC) or µs since the epoch."""
    if text.isdigit():
        return int(text)
    try:
        moment = iso_moment(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text} is not a time: give ISO 8601 (2026-12-01T09:00:00Z) or µs since "
            "the epoch") from None
    try:
        return epoch_us(moment, "the time")
    except ValueError:  # a time, but not one the node takes
        raise argparse.ArgumentTypeError(
            f"{text} is out of range: give a time from 1970 to 9999") from None


def add_curve_options(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument("--curve-client-key", metavar="FILE", default=default,
                        help="this client's CURVE key pair (a .key_secret file)")
    parser.add_argument("--curve-server-key", metavar="FILE", default=default,
                        help="the node's public CURVE key (a .key file)")


def curve_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ClientSecurity:
    try:
        return security.client_curve(args.curve_client_key, args.curve_server_key)
    except ConfigError as exc:
        parser.error(str(exc))


def fail(prog: str, message: str, code: int) -> int:
    """Say what went wrong in one line on stderr; returns the exit code."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def tool_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A client tool's parser: one-line errors, defaults shown, the CURVE options."""
    parser = ToolParser(prog, description)
    add_curve_options(parser)
    return parser
