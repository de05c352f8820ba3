"""Which archive directories one Spark read covers, and the ``node`` each is named by.

A read takes every directory of ``path`` (what ``.load(...)`` sets, comma separated),
of ``paths`` (what ``.load([...])`` sets: a JSON array; or comma separated) and of
the nodes whose monitor endpoints ``monitor`` names (comma separated; each node's
``STATS`` gives its ``archive_dir``, which must be on this host). A row's ``node``
is the node id for a directory found by ``monitor``, otherwise the directory's name,
or as many of its last path parts as tell it from the other directories given
(``a/archive`` and ``b/archive``). With CURVE on the nodes, ``curve_client_key`` (this
client's ``.key_secret`` file) and ``curve_server_key`` (the nodes' public ``.key`` file)
are the keys the monitors are asked with, as ``--curve-client-key`` and
``--curve-server-key`` are the tools'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq import security
from pzq.archive.format.archive_dir import archive_dir_problem
from pzq.errors import ConfigError
from pzq.security import ClientSecurity

MONITOR_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ArchiveDir:
    directory: Path
    node: str  # the ``node`` column of its rows

    @property
    def key(self) -> str:
        """The directory as given: a stream's offsets are kept under it."""
        return str(self.directory)


def archive_dirs(options: Mapping[str, str]) -> tuple[ArchiveDir, ...]:
    """The directories of a read, each checked to be a readable directory."""
    given = [Path(text) for text in _listed(options.get("path")) + _paths(options)]
    monitors = _listed(options.get("monitor"))
    found = [*_named(given), *_from_monitors(monitors, monitor_curve(options))]
    if not found:
        raise ValueError("give the archive directory: .load(ARCHIVE_DIR), several as "
                         ".load([DIR, ...]) or comma separated, or a node's monitor "
                         "endpoint with .option('monitor', ...)")
    unique: dict[Path, ArchiveDir] = {}
    for archive in found:  # a directory given twice is read once
        _check(archive.directory)
        unique.setdefault(archive.directory.resolve(), archive)
    return tuple(unique.values())


def archive_topics(directory: Path) -> tuple[str, ...]:
    """The topics an archive directory holds: its subdirectories."""
    return tuple(sorted(path.name for path in directory.iterdir() if path.is_dir()))


def monitor_curve(options: Mapping[str, str]) -> ClientSecurity:
    """The CURVE keys to ask the nodes' monitors with (None: without CURVE)."""
    return curve_from_files(options.get("curve_client_key"), options.get("curve_server_key"))


def curve_from_files(client_key: str | None, server_key: str | None) -> ClientSecurity:
    """The keys in the files the options name; one error naming what is wrong."""
    try:
        return security.client_curve(client_key, server_key)
    except ConfigError as exc:
        raise ValueError(f"{exc} (options curve_client_key and curve_server_key)") from None


def ask_stats(endpoint: str, curve: ClientSecurity) -> dict[str, Any]:
    """A node's STATS, on the driver; TimeoutError saying why when it does not answer."""
    from pzq.client import request_monitor  # ZeroMQ, on the driver only

    stats: dict[str, Any] = json.loads(request_monitor(endpoint, "STATS", MONITOR_TIMEOUT_S,
                                                       curve))
    return stats


def _listed(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _paths(options: Mapping[str, str]) -> list[str]:
    text = options.get("paths", "").strip()
    if not text.startswith("["):
        return _listed(text)
    listed = json.loads(text)  # .load([...]) sets paths to a JSON array
    if not isinstance(listed, list) or not all(isinstance(path, str) for path in listed):
        raise ValueError(f"paths is a list of archive directories, not {text!r}")
    return [path for path in listed if path.strip()]


def _named(directories: list[Path]) -> list[ArchiveDir]:
    """Each directory named by its shortest tail of path parts no other one ends with."""
    parts = [directory.absolute().parts for directory in directories]
    named = []
    for mine, directory in zip(parts, directories, strict=True):
        others = {other for other in parts if other != mine}
        length = 1
        while length < len(mine) and any(other[-length:] == mine[-length:]
                                         for other in others):
            length += 1
        named.append(ArchiveDir(directory, str(Path(*mine[-length:]))))
    return named


def _from_monitors(endpoints: list[str], curve: ClientSecurity) -> list[ArchiveDir]:
    found = []
    for endpoint in endpoints:
        stats = ask_stats(endpoint, curve)
        directory = (stats.get("archive") or {}).get("archive_dir")
        if not directory:
            raise ValueError(f"the node at {endpoint} keeps no archive (no --archive-dir)")
        if not Path(directory).is_dir():
            raise ValueError(f"the archive directory {directory} of the node at {endpoint} "
                             "is not on this host")
        found.append(ArchiveDir(Path(directory), str(stats.get("node_id", endpoint))))
    return found


def _check(directory: Path) -> None:
    problem = archive_dir_problem(directory)
    if problem is not None:
        raise ValueError(problem)
