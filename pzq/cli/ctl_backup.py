"""``pzq-ctl backup DIR``: begin a backup of a running node and wait for its end.

The node answers BACKUP at once with the backup's id; the tool then asks for its
state every POLL_S, says its progress on stderr as it moves, and ends with the
summary on stdout (exit 0) or the node's reason (exit 1). DIR is on the node's
host: the tool sends it as an absolute path, taken from its own working directory.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from pzq.cli.common import fail
from pzq.cli.human import count, duration, size
from pzq.client import request_monitor
from pzq.errors import EndpointError, ExitCode
from pzq.protocol.monitor_text import parse_monitor_text
from pzq.security import ClientSecurity

POLL_S = 0.5
NO_BACKUPS = b"ERROR: unknown command 'BACKUP'"  # a release before backups


def run_backup(prog: str, dsn: str, directory: Path, timeout: float,
               curve: ClientSecurity | None) -> int:
    target = directory.absolute()
    if any(character.isspace() for character in str(target)):
        return fail(prog, f"{target}: give a directory whose path holds no spaces (the "
                          "monitor's command is split at them)", ExitCode.USAGE)

    def notice(text: str) -> None:  # while it waits: why no answer came yet
        print(f"{prog}: {text}", file=sys.stderr, flush=True)

    def ask(command: str) -> dict[str, str]:
        reply = request_monitor(dsn, command, timeout, curve, notice)
        if reply.startswith(NO_BACKUPS):
            raise RuntimeError("error: this node's release has no backups (it answers "
                               "BACKUP with unknown command): stop the node and copy its "
                               "--database and --archive-dir (cp -a) while it is stopped; "
                               "that copy is the backup to go back on")
        if reply.startswith(b"ERROR"):
            raise RuntimeError(reply.decode(errors="replace").strip())
        return parse_monitor_text(reply)

    backup_id = ""  # once the node answered the beginning
    try:
        backup_id = ask(f"BACKUP {target}")["backup"]
        print(f"{prog}: backup {backup_id} into {target} begun", file=sys.stderr, flush=True)
        return _wait(prog, backup_id, ask)
    except RuntimeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    except EndpointError as exc:
        return fail(prog, str(exc), ExitCode.USAGE)
    except TimeoutError as exc:
        return fail(prog, f"{exc}{_unanswered(backup_id, target)}", ExitCode.FAILURE)
    except KeyboardInterrupt:
        return _stopped_waiting(prog)


def _unanswered(backup_id: str, target: Path) -> str:
    """Why the node may not answer, and what becomes of the copy. Gone after it began
    the backup, it was killed (a partial copy stays), stopped (it removed the copy as
    it stopped, often before the next poll could hear it fail) or it hangs."""
    if not backup_id:  # (said as if one had begun, where mostly none had)
        return ("; no backup is known to have begun: if the node took BACKUP before it "
                "fell silent, the backup goes on there (STATS shows it)")
    return (f" during backup {backup_id}: if the node was killed, {target} holds a partial "
            "copy, refused at start (its manifest says so): remove it and back up again "
            "once the node runs; if it was stopped, it removed the copy (backup_failed in "
            "its log); if it is slow, STATS shows the backup")


def _stopped_waiting(prog: str) -> int:
    print(f"{prog}: stopped waiting; the backup goes on in the node (STATS shows it)",
          file=sys.stderr)
    return ExitCode.INTERRUPTED


def _wait(prog: str, backup_id: str, ask: Callable[[str], dict[str, str]]) -> int:
    said = ""
    while True:
        time.sleep(POLL_S)  # a tool waiting on a node, not a test
        status = ask("BACKUP")
        if status.get("backup") != backup_id:
            return fail(prog, f"the node no longer knows backup {backup_id} (did it restart? "
                              "a backup cut short is removed, or refused at start)",
                        ExitCode.FAILURE)
        if status["state"] == "done":
            print(_summary(status))
            return ExitCode.OK
        if status["state"] != "running":
            return fail(prog, f"backup {backup_id} failed: {status.get('error', '')}",
                        ExitCode.FAILURE)
        line = _progress(status)
        if line != said:
            print(f"{prog}: backup {backup_id}: {line}", file=sys.stderr, flush=True)
            said = line


PHASES = {"prepare": "beginning", "store": "copying the store",
          "files": "hashing the store's copy", "archive": "copying the archive",
          "manifest": "writing the manifest"}


def _progress(status: dict[str, str]) -> str:
    return (f"{PHASES.get(status['phase'], status['phase'])}: store "
            f"{count(int(status['store_keys']))} keys ({size(int(status['store_bytes']))}), "
            f"archive {size(int(status['archive_bytes']))} of "
            f"{size(int(status['archive_total_bytes']))}")


def _summary(status: dict[str, str]) -> str:
    directory = status["directory"]
    archive = status["archive"] == "on"
    return (f"backup {status['backup']} done in {duration(float(status['seconds']))}: "
            f"{directory} (store {count(int(status['store_keys']))} keys, "
            f"{size(int(status['store_bytes']))}"
            + (f"; archive {size(int(status['archive_bytes']))}" if archive else "")
            + "); restore it on a copy, NEW a directory that does not exist yet (a node "
            + f"started on the backup itself changes it): cp -a {directory} NEW && "
            + "pzq --database NEW/store"
            + (" --archive-dir NEW/archive" if archive else ""))
