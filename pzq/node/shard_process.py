"""How the supervisor of ``pzq --shards N`` starts one shard: the command, the
environment, the pipe it reports its start on (pzq.node.start_report), and the tie
that ends the shard when the supervisor dies."""

from __future__ import annotations

import ctypes
import os
import signal
import site
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pzq
from pzq.errors import ExitCode
from pzq.logs import SHARD_ENV
from pzq.node.start_report import REPORT_FD

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def start_shard(arguments: Sequence[str], number: int | None = None
                ) -> tuple[subprocess.Popen[bytes], int]:
    """``pzq ARGUMENTS`` as a child, and the read end of the pipe it reports its start
    on (pzq.node.start_report.read_report); its log goes where the supervisor's goes,
    each line with ``shard``: ``number``."""
    read_end, write_end = os.pipe()
    try:
        # -P: the working directory is not put on sys.path, so a folder named pzq there
        # (a clone, say) is not imported instead of the pzq this supervisor runs.
        process = subprocess.Popen(
            [sys.executable, "-P", "-m", "pzq", *arguments], stdin=subprocess.DEVNULL,
            env={**_environment(), REPORT_FD: str(write_end),
                 **({} if number is None else {SHARD_ENV: str(number)})},
            pass_fds=(write_end,),
            preexec_fn=_prepare_child(),
            # A process group of its own: a Ctrl-C in the terminal reaches the supervisor
            # alone, which forwards it once; a second SIGINT would make a node exit at once.
            process_group=0)
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)  # the shard's alone: its exit ends the pipe
    return process, read_end


def _environment() -> dict[str, str]:
    """The supervisor's environment, in which ``python -P`` imports this same pzq (also
    when it runs from a source folder, not an installed package)."""
    root = Path(pzq.__file__).resolve().parents[1]
    known = [*site.getsitepackages(), site.getusersitepackages()]
    given = os.environ.get("PYTHONPATH", "")
    if root in {Path(path).resolve() for path in known} or str(root) in given.split(os.pathsep):
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), given)))}


# held until the node's handlers are in place (SIGHUP: its rules read again)
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _prepare_child() -> Callable[[], None]:
    """Run in the child before exec: its stop signals and SIGHUP held until the node
    can act on them (pzq.node.main unblocks them once its handlers are in place: a
    signal the supervisor forwards while a restarted shard still starts would
    otherwise kill it with Python's default handlers), and its tie to the supervisor."""
    tie = _end_with_supervisor()

    def prepare() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        if tie is not None:
            tie()

    return prepare


def _end_with_supervisor() -> Callable[[], None] | None:
    """Run in the child before exec: the kernel sends it SIGTERM when the supervisor
    dies, also by SIGKILL, when no code of the supervisor's can run. A child watching
    its parent's pid would need a poll in every node; this needs nothing there, and
    SIGTERM makes the node stop as on request, handing back the ACKs it owes. The
    signal follows the death of the thread that started the child: the supervisor
    starts every child from its one thread, which lives as long as it does."""
    if not sys.platform.startswith("linux"):
        return None  # elsewhere a killed supervisor leaves its shards running
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    supervisor = os.getpid()

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != supervisor:  # it died before the tie was made: no signal comes
            os._exit(ExitCode.FAILURE)

    return tie
