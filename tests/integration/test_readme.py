"""The README's two set-up commands work as a newcomer would run them, and the README and
the pages under docs/ hold together: every page linked, the site built without a warning."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import docutils.core
import pytest

from tests.support.harness import wait_until

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.rst").read_text()


def quick_start_commands() -> list[str]:
    """The quick start's set-up commands (``scripts/...``), in the README's order."""
    section = README.split(".. begin-quick-start", 1)[1].split(".. end-quick-start", 1)[0]
    blocks = re.findall(r"^\.\. code-block:: sh\n\n((?:   .*\n)+)", section, re.M)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith("scripts/")]


@pytest.mark.timeout(20)
def test_readme_is_valid_restructuredtext():
    docutils.core.publish_doctree(README, settings_overrides={"halt_level": 2,
                                                              "report_level": 5})


@pytest.mark.timeout(10)
def test_ci_runs_the_readme_test_command():
    start, test = quick_start_commands()
    assert (start, test) == ("scripts/start-node", "scripts/run-tests")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{test} \|\| tests=\$\?$", ci, re.M), ci
    assert ci.rstrip().endswith('exit "$failed"')  # a failed check fails CI too


@pytest.mark.timeout(10)
def test_readme_links_every_docs_page_and_each_link_finds_its_page():
    linked = re.findall(r"<(docs/[^>]+)>`_", README)
    assert linked and len(linked) == len(set(linked))
    assert all((ROOT / name).is_file() for name in linked), linked
    pages = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.rst")}
    assert pages - {"docs/index.rst"} == set(linked)


@pytest.mark.timeout(10)
def test_every_node_option_is_in_the_options_table():
    from pzq.node.options import OPTIONS

    table = (ROOT / "docs" / "options.rst").read_text()
    assert [option.flag for option in OPTIONS if f"``{option.flag}" not in table] == []


@pytest.mark.timeout(10)
def test_ci_checks_the_code_beside_the_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"$venv/bin/ruff" check .' in ci and '"$venv/bin/mypy"' in ci
    # the docs are built by the suite (test_docs_build_without_a_warning), once
    assert "scripts/build-docs" not in ci


@pytest.mark.timeout(180)
def test_docs_build_without_a_warning(tmp_path):
    built = subprocess.run([str(ROOT / "scripts" / "build-docs"), str(tmp_path / "html")],
                           capture_output=True, text=True, timeout=170, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    # A build of minutes is not a silent wait: it says what it does, then where to look.
    said = built.stderr.splitlines()
    assert said[0].startswith(f"build-docs: building the HTML into {tmp_path / 'html'} ("), said
    assert said[-1] == f"build-docs: built: open {tmp_path / 'html'}/index.html", said
    tutorial = (tmp_path / "html" / "tutorial.html").read_text()
    assert "scripts/start-node" in tutorial and "pzq-consume" in tutorial  # the quick start
    assert (tmp_path / "html" / "_images" / "status-page.png").is_file()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args", [["--bogus"], ["one", "two"]])
def test_build_docs_refuses_what_it_does_not_take(args):
    """An option went on to sphinx-build, which answered with its own usage (the
    arguments required: OUTPUT_DIR, filenames), none of them this script's."""
    ran = subprocess.run([str(ROOT / "scripts" / "build-docs"), *args], capture_output=True,
                         text=True, timeout=20, check=False)
    assert (ran.returncode, ran.stdout) == (2, "")
    (line,) = ran.stderr.splitlines()
    assert line.startswith("build-docs: error: ") and "scripts/build-docs [OUTPUT_DIR]" in line


def fresh_copy(destination: Path) -> Path:
    """The repository as a clone would have it: tracked and new files, no environment."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_start_command_creates_its_environment_and_runs_a_node(tmp_path):
    clone = fresh_copy(tmp_path / "pzq")
    assert not (clone / ".venv").exists()
    start, _ = quick_start_commands()
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PZQ_VENV")}
    process = subprocess.Popen(
        [start, "--receive-dsn", "tcp://127.0.0.1:*", "--send-dsn", "tcp://127.0.0.1:*",
         "--monitor-dsn", "tcp://127.0.0.1:*", "--log-format", "json"],
        cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []

        def ready() -> dict | None:
            line = process.stderr.readline()
            lines.append(line)
            if not line and process.poll() is not None:
                raise AssertionError("start command exited: " + "".join(lines[-20:]))
            if line.startswith("{") and json.loads(line)["event"] == "node_ready":
                return json.loads(line)
            return None

        event = wait_until(ready, 240, interval=0, message="node_ready from the start command")
        # The README quotes the line a first start says (not run-tests' later one).
        (said,) = [line.strip() for line in lines if line.startswith("ensure-env:")]
        assert f"``{said}``" in " ".join(README.split()), said
        assert re.match(r"tcp://127\.0\.0\.1:\d+$", event["receive"])
        assert (clone / ".venv" / "bin" / "pzq").exists()
        assert (clone / "pzq-data").is_dir()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
