"""The scripts typed as the docs print them (``scripts/bench.py --quick``) start under
whatever python3 the shell finds: one without pyzmq and pzq starts them again with
the project's environment, or says in one line what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# (python -S: no site-packages, so neither pyzmq nor pzq, as a system python3)
BARE = [sys.executable, "-S"]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BARE, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, **env})


@pytest.mark.timeout(90)
def test_a_script_under_a_python_without_pzq_runs_in_the_project_environment():
    assert _run(["-c", "import zmq"]).returncode != 0  # the premise: a bare python
    env = os.environ.get("PZQ_VENV") or sys.prefix
    ran = _run(["scripts/bench.py", "--help"], PZQ_VENV=env)
    assert (ran.returncode, ran.stderr) == (0, "")
    assert ran.stdout.startswith("usage: pzq-bench")


@pytest.mark.timeout(90)
def test_a_script_without_a_project_environment_says_so_in_one_line(tmp_path):
    ran = _run(["scripts/chaos.py", "--help"], PZQ_VENV=str(tmp_path / "none"))
    assert ran.returncode == 1 and ran.stdout == ""
    assert ran.stderr.splitlines() == [
        f"chaos.py: {sys.executable} lacks pyzmq or pzq, and there is no project "
        f"environment at {tmp_path / 'none'}: scripts/ensure-env makes it (or run the "
        f"script with a python that has pzq installed)"]


def test_every_script_with_a_hash_bang_is_executable_and_imports_project_env_first():
    for script in sorted((ROOT / "scripts").glob("*.py")):
        text = script.read_text()
        if not text.startswith("#!"):
            continue
        assert os.access(script, os.X_OK), script.name
        imports = [line for line in text.splitlines()
                   if line.startswith(("import ", "from ")) and "__future__" not in line]
        assert imports[0].startswith("import project_env"), script.name
