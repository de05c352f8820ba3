"""scripts/archive_report.py: an --archive that is no archive is one usage line, before
Spark starts (it was the Spark source's error inside the Python worker's traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pzq.archive.format.archive_dir import archive_dir_problem
from tests.support.archive_damage import write_archive

pytestmark = pytest.mark.timeout(60)
SCRIPT = Path(__file__).parents[2] / "scripts" / "archive_report.py"


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=50, check=False)


def usage_error(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 2 and ran.stdout == "" and "Traceback" not in ran.stderr, ran
    *usage, line = ran.stderr.strip().splitlines()
    assert usage and usage[0].startswith("usage: archive_report")
    return line


def test_a_folder_that_is_not_an_archive_is_one_usage_line(tmp_path):
    store = tmp_path / "pzq-data"  # the node's store given by mistake
    store.mkdir()
    (store / "CURRENT").write_text("MANIFEST-000001\n")
    assert usage_error(report("--archive", str(store), "--out", str(tmp_path / "r"))) == (
        f"archive_report: error: {store} is not a pzq archive directory: it holds no "
        "topic folder with segments (<20-digit offset>.dat) and no node's .lock; give "
        "the directory of the node's --archive-dir")
    assert not (tmp_path / "r").exists()


def test_a_missing_archive_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    assert usage_error(report("--archive", str(missing), "--out", str(tmp_path / "r"),
                              "--stream", "--once")) == (
        f"archive_report: error: the archive directory {missing} does not exist")


def test_the_one_check_of_every_reader(tmp_path):
    """archive_dir_problem, which the report, pzq-archive and the Spark source ask."""
    write_archive(tmp_path / "archive", count=3)
    assert archive_dir_problem(tmp_path / "archive") is None
    (tmp_path / "empty").mkdir()
    assert archive_dir_problem(tmp_path / "empty") is None  # a node's before its first
    (tmp_path / "file").write_text("")
    assert archive_dir_problem(tmp_path / "file") == (
        f"the archive directory {tmp_path / 'file'} is not a directory")
    parent = tmp_path / "parent"  # the archive's parent, given by mistake
    write_archive(parent / "archive", count=3)
    assert archive_dir_problem(parent).startswith(f"{parent} is not a pzq archive")
