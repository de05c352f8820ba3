"""The ``pzq`` daemon: options, start-up, signals and exit codes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from pzq import __version__, logs
from pzq.durations import DurationError, duration_us
from pzq.archive.topiclog import ArchiveError
from pzq.config import OPTIONS, Config, Option, build_config
from pzq.errors import ConfigError, StoreError
from pzq.node.clock import Now
from pzq.node.run import StopRequest, run
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.security import load_key_pair
from pzq.sockets import BindError
from pzq.store.store import Store

EXIT_OK = 0  # stopped on request, everything handed back
EXIT_FAILURE = 1  # an unexpected error; the log says which
EXIT_USAGE = 2  # a bad option, value or config file
EXIT_STORE = 3  # the database or archive directory could not be opened or written
EXIT_BIND = 4  # an endpoint could not be bound (in use, bad address)
EXIT_INTERRUPTED = 130  # a second stop signal: exited at once without handing back


class OneLineParser(argparse.ArgumentParser):
    """Report a bad option as one clear line on stderr, not usage plus error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def make_argument_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="pzq", description="Persistent store-and-forward device for ZeroMQ.",
        argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help="TOML file of options (the command line wins)")
    parser.add_argument("--version", action="version", version=f"pzq {__version__}")
    for option in OPTIONS:
        flags = (option.flag, *option.aliases)
        default = f" (default: {option.default})" if option.default not in (None, ()) else ""
        if option.kind is bool:
            parser.add_argument(*flags, dest=option.name, action="store_true",
                                help=option.help)
        else:
            parser.add_argument(*flags, dest=option.name, type=_argument_type(option.kind),
                                metavar=_metavar(option), help=option.help + default)
    return parser


def _argument_type(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows the text of an ArgumentTypeError as it is: a duration explains itself."""
    if kind is not duration_us:
        return kind

    def parse(text: str) -> int:
        try:
            return duration_us(text)
        except DurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _metavar(option: Option) -> str:
    return "DURATION" if option.kind is duration_us else option.name.upper()


def parse_config(argv: Sequence[str] | None) -> Config:
    parser = make_argument_parser()
    given: dict[str, Any] = vars(parser.parse_args(argv))
    config_file = given.pop("config", None)
    try:
        return build_config(given, config_file)
    except ConfigError as exc:
        parser.error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logs.configure(config.log_level, config.log_format)
    log = logs.get_logger("pzq")
    try:
        curve = load_key_pair(config.curve_secret_key) if config.curve_secret_key else None
    except ConfigError as exc:
        print(f"pzq: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        store = Store.open(config.database, hard_sync=config.hard_sync)
    except StoreError as exc:
        print(f"pzq: error: {exc}", file=sys.stderr)
        return EXIT_STORE
    waker = Waker()
    stop = StopRequest()
    previous = install_signal_handlers(stop, waker)
    try:
        run(NodeState(config, store, Now.read()), waker, stop, curve)
    except BindError as exc:
        print(f"pzq: error: {exc}", file=sys.stderr)
        return EXIT_BIND
    except ConfigError as exc:  # found only once the node starts, e.g. the keys directory
        print(f"pzq: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ArchiveError as exc:
        print(f"pzq: error: {exc}", file=sys.stderr)
        return EXIT_STORE
    except Exception:
        log.exception("node_failed")
        return EXIT_FAILURE
    finally:
        restore_signal_handlers(previous)
        store.close()
        waker.close()
    log.info("node_stopped", messages=store.messages)
    return EXIT_OK


def install_signal_handlers(stop: StopRequest, waker: Waker) -> dict[int, Any]:
    """First SIGTERM/SIGINT: stop taking work and hand back. Second: exit at once."""

    def on_stop(signum: int, frame: object) -> None:
        if stop.requested:
            os._exit(EXIT_INTERRUPTED)
        stop.requested = True

    previous = {signum: signal.signal(signum, on_stop)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    # A file-size limit must fail the write (and refuse that batch), not kill the node.
    previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.set_wakeup_fd(waker.write_fd, warn_on_full_buffer=False)
    return previous


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    signal.set_wakeup_fd(-1)
    for signum, handler in previous.items():
        signal.signal(signum, handler)
