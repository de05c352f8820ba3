"""The ``pzq`` daemon: options, start-up, signals and exit codes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pzq import __version__, logs
from pzq.authorization import NO_AUTHORIZATION
from pzq.backup.manifest import check_restore, restore_skip, restored
from pzq.clock import Now
from pzq.durations import DurationError, duration_text, duration_us
from pzq.errors import ConfigError, ExitCode, PzqError
from pzq.node.config import Config
from pzq.node.keys import node_curve, warn_if_others_may_read
from pzq.node.options import OPTIONS, Option, build_config
from pzq.node.original_only import original_only
from pzq.node.run import StopRequest, run
from pzq.node.shards import run_shards
from pzq.node.start_report import NO_REPORT, StartReport, start_report
from pzq.node.state import NodeState
from pzq.node.waker import Waker
from pzq.store.directory import (
    refuse_lost_current,
    refuse_lost_log,
    refuse_other_content,
    refuse_unusable,
)
from pzq.store.store import Store
from pzq.tool_base import OneLineParser


class Reloadable(Protocol):
    def ask_reload(self) -> None: ...  # only sets a flag: the loop reads the file


class BothReloads:
    """SIGHUP asks the --authorization rules and the CURVE key directories."""

    def __init__(self, *reloads: Reloadable) -> None:
        self.reloads = reloads

    def ask_reload(self) -> None:
        for reload in self.reloads:
            reload.ask_reload()


def make_argument_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="pzq", description="Persistent store-and-forward device for ZeroMQ.",
        argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help="TOML file of options (the command line wins)")
    parser.add_argument("--version", action="version", version=f"pzq {__version__}")
    for option in OPTIONS:
        flags = (option.flag, *option.aliases)
        default = f" (default: {option.default})" if option.default not in (None, (), "") else ""
        if option.kind is duration_us and option.default:  # 5000000 alone: count the zeros
            default = f" (default: {option.default}, that is {duration_text(option.default)})"
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
    refusal = original_only(sys.argv[1:] if argv is None else argv)
    if refusal:
        parser.error(refusal)
    given: dict[str, Any] = vars(parser.parse_args(argv))
    config_file = given.pop("config", None)
    try:
        return build_config(given, config_file)
    except ConfigError as exc:
        parser.error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    config = parse_config(arguments)
    logs.configure(config.log_level, config.log_format)
    if config.shards > 1:
        return _supervise(config, arguments)
    log = logs.get_logger("pzq")
    report = start_report()  # a shard's to its supervisor
    try:
        curve = node_curve(config)
        warn_if_others_may_read(config.curve_secret_key)
        store = open_store(config)
    except PzqError as exc:
        return _failed(exc, report)
    try:
        node = NodeState(config, store, Now.read())  # e.g. an --authorization file's mistake
    except PzqError as exc:
        store.close()
        return _failed(exc, report)
    waker = Waker()
    stop = StopRequest()
    previous = install_signal_handlers(stop, waker,
                                       BothReloads(node.authorization, node.keys))
    try:
        run(node, waker, stop, curve, report=report, owns_process=True)
    except PzqError as exc:  # e.g. an endpoint in use, an archive that cannot be opened
        return _failed(exc, report)
    except Exception:
        log.exception("node_failed")
        return ExitCode.FAILURE
    finally:
        restore_signal_handlers(previous)
        store.close()
        waker.close()
    log.info("node_stopped", messages=store.messages)
    return ExitCode.OK


def _supervise(config: Config, arguments: list[str]) -> int:
    """``--shards N``: this process starts and watches N nodes instead of being one."""
    try:
        return run_shards(config, arguments)
    except PzqError as exc:  # shards that cannot run side by side, a --database holding more
        return _failed(exc)


def open_store(config: Config) -> Store:
    """The node's store; a folder holding something else is refused, and so is a
    backup's copy that is incomplete or changed (pzq.backup.manifest)."""
    database = Path(config.database)
    archive_dir = Path(config.archive_dir) if config.archive_dir else None
    refuse_unusable(database)  # (before any look inside it)
    backup = check_restore(database, archive_dir)
    refuse_other_content(database)
    refuse_lost_current(database)
    refuse_lost_log(database)
    store = Store.open(database, hard_sync=config.hard_sync,
                       sync_interval_s=config.sync_interval_s, now=Now.read().mono)
    if backup is not None:
        copy_end = store.next_seq
        store.skip_seqs(restore_skip(backup, Now.read().wall_us))
        # (the original's seqs after the copy's end: its peers deliver their copies)
        lost = restored(database, backup, (copy_end, store.next_seq))
        archive = ("none in the backup" if backup.get("archive") is None else
                   "checked" if archive_dir else "not restored (no --archive-dir)")
        logs.get_logger("pzq").info("backup_restored", backup=backup["backup"],
                                    taken_at=backup["taken_at"], node_id=backup["node_id"],
                                    archive=archive, next_seq=store.next_seq,
                                    lost_seqs=lost)
    return store


def _failed(exc: PzqError, report: StartReport = NO_REPORT) -> int:
    """A node that cannot start says why in one line, and exits with the error's code."""
    print(f"pzq: error: {exc}", file=sys.stderr)
    report.failed(str(exc))
    return exc.exit_code


def install_signal_handlers(stop: StopRequest, waker: Waker,
                            reloads: Reloadable = NO_AUTHORIZATION) -> dict[int, Any]:
    """First SIGTERM/SIGINT: stop taking work and hand back. Second: exit at once.
    SIGHUP: read the --authorization file and the CURVE key directories again (at
    the wake the signal causes)."""

    def on_stop(signum: int, frame: object) -> None:
        if stop.requested:
            os._exit(ExitCode.INTERRUPTED)
        stop.requested = True

    def on_reload(signum: int, frame: object) -> None:
        reloads.ask_reload()

    previous: dict[int, Any] = {signum: signal.signal(signum, on_stop)
                                for signum in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_reload)
    # A file-size limit must fail the write (and refuse that batch), not kill the node.
    previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.set_wakeup_fd(waker.write_fd, warn_on_full_buffer=False)
    # A shard starts with these held (pzq.node.shard_process): one that came meanwhile
    # is handled now, as a stop requested before the first wake.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
    return previous


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    signal.set_wakeup_fd(-1)
    for signum, handler in previous.items():
        signal.signal(signum, handler)
