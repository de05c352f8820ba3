"""The scripts' first import: a script typed as the docs print it (``scripts/bench.py
--quick``) starts under whatever ``python3`` the shell finds, which lacks pyzmq and pzq;
this starts it again with the project's environment (``.venv``, or ``$PZQ_VENV``), as
``.venv/bin/python scripts/bench.py --quick`` would. An interpreter that has both
already (the environment itself, or one pzq was installed into) goes on as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEEDED = ("zmq", "pzq")


def _has_everything() -> bool:
    # (pzq is found from the checkout when run from its root, so pyzmq decides too)
    return all(importlib.util.find_spec(name) is not None for name in NEEDED)


def _run_in_project_env() -> None:
    if _has_everything():
        return
    env = Path(os.environ.get("PZQ_VENV") or ROOT / ".venv")
    python = (env if env.is_absolute() else ROOT / env) / "bin" / "python"
    script = Path(sys.argv[0]).name
    if not python.exists():
        sys.exit(f"{script}: {sys.executable} lacks pyzmq or pzq, and there is no project "
                 f"environment at {python.parent.parent}: scripts/ensure-env makes it "
                 f"(or run the script with a python that has pzq installed)")
    if Path(sys.prefix).resolve() == python.parent.parent.resolve():
        sys.exit(f"{script}: the project environment at {python.parent.parent} lacks "
                 f"pyzmq or pzq: scripts/ensure-env mends it")
    os.execv(python, [str(python), *sys.argv])


_run_in_project_env()
