"""The examples of the pages a new user follows run as written, against real nodes, so an
example that stops working fails here.

Each page's code blocks run in the page's order, in a directory of their own, as a
user pasting them one after the other would: an sh block line by line with bash, a
python block as a script (so one with ``await`` at its top level fails: ``python``
refuses it, and the asyncio REPL, ``python -m asyncio``, ends a statement pasted
with a blank line in it there), a toml block is read as the node reads its
``--config`` file (every key an option, every value of its type), or as its
``--authorization`` file when its tables are ``[default]`` and ``[clients.KEY]``. A block that
cannot run here (several hosts, Spark, root, a transcript with output, a benchmark
of minutes) has an rst comment right before it, ``.. excerpt: <why>``; every other
block of every page runs, and a code block of another language fails the test until
it is run or marked.

One rewrite, ``Page.moved``, makes the examples hermetic, and nothing else is changed:

* tcp ports 11130-11159 (a node's defaults and the examples' own) move to a free
  block of 30 ports, and 21130-21159 (``scripts/local-cluster``'s) to another,
  each keeping its offset, so that a shard's +10 still holds; any other fixed port
  fails the test;
* ``ipc:///tmp/NAME`` becomes ``ipc://<the page's directory>/NAME``;
* endpoints left to a default are given, moved the same way: a node's
  ``--receive-dsn``, ``--send-dsn``, ``--monitor-dsn`` (with ``--shards`` also
  ``--broadcast-dsn``), and ``--dsn`` of ``pzq-produce``, ``pzq-consume``,
  ``pzq-monitor`` and ``pzq-ctl`` when a line gives neither ``--dsn`` nor
  ``--routes``;
* ``.venv/bin/`` is this interpreter's environment, ``scripts/`` the repository's,
  and ``scripts/start-node`` (ensure-env, then ``pzq``) is that environment's
  ``pzq`` run in the page's directory, where its relative paths land.

A line that starts a node (``scripts/start-node``, ``pzq``, ``.venv/bin/pzq``) runs in
the background and is waited for (every shard's ``node_ready``); one with other
options than the running node's stops that node first, as the pages tell the user to.
A page whose first examples use a node started elsewhere names its start line in
``PRELUDE``. Before each block the nodes settle (nothing in flight, no ACK owed, the
archive fsync'd to its end), as they do while a user reads on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from pzq.authorization import load_rules
from pzq.cli.common import DEFAULT_MONITOR
from pzq.cli.consume import DEFAULT_CONSUME, DEFAULT_SEND
from pzq.cli.produce import DEFAULT_RECEIVE
from pzq.client import request_monitor
from pzq.errors import ConfigError
from pzq.node.endpoints import MONITOR
from pzq.node.main import parse_config
from pzq.node.options import OPTIONS_BY_NAME, read_config_file
from pzq.node.shard_layout import BASE_BROADCAST, plan_shards
from tests.support.harness import wait_until
from tests.support.ports import block_of_ports

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
PAGES = ["tutorial.rst", "groups.rst", "time.rst", "cluster.rst", "archive.rst",
         "monitoring.rst", "asyncio.rst", "operations.rst", "deploying.rst",
         "development.rst", "performance.rst"]
# The tutorial starts after README's quick start, whose node runs in another terminal
# (tests/integration/test_readme.py starts it from a fresh clone); so do asyncio's
# and time's.
PRELUDE = {"tutorial.rst": "scripts/start-node", "asyncio.rst": "scripts/start-node",
           "time.rst": "scripts/start-node"}
LINE_TIMEOUT_S = 90
DOC_PORTS, CLUSTER_PORTS = range(11130, 11160), range(21130, 21160)
TOOL_DEFAULTS = {"produce": DEFAULT_RECEIVE, "monitor": DEFAULT_MONITOR, "ctl": DEFAULT_MONITOR}
NODE_DEFAULTS = [(OPTIONS_BY_NAME[name].flag, str(OPTIONS_BY_NAME[name].default))
                 for name in ("receive_dsn", "send_dsn", "monitor_dsn")]
STARTS_NODE = re.compile(r"^(scripts/start-node|pzq|\.venv/bin/pzq)(\s|$)")
TOOL = re.compile(r"(?<![\w-])(?P<tool>(?:\S*/)?pzq-(?P<name>produce|consume|monitor|ctl))"
                  r"(?P<rest>[^|;&\n]*)")
ENDPOINT_PORT = re.compile(r"(tcp://[^\s:'\"/]+|tcp://\[[^\]]+\]):(\d+)")
pytestmark = [pytest.mark.timeout(300)]


# -- the blocks of a page -------------------------------------------------------------------

@dataclass
class Block:
    page: str
    line: int  # of the code-block directive, in the page as read (includes resolved)
    language: str
    code: str
    excerpt: str | None  # the reason it is not run, from ``.. excerpt:``

    def where(self) -> str:
        return f"{self.page}, the {self.language} block at line {self.line}"


DIRECTIVE = re.compile(r"^\.\. code-block:: *(\S+)\n((?:[ \t]*\n|   .*\n)+)", re.M)
EXCERPT = re.compile(r"^\.\. excerpt:(.*(?:\n   .*)*)\n\n(?=\.\. code-block::)", re.M)
STRAY_EXCERPT = re.compile(r"^\.\. excerpt:", re.M)
INCLUDE = re.compile(r"^\.\. include:: (\S+)\n   :start-after: (.+)\n   :end-before: (.+)\n",
                     re.M)


def page_text(page: str) -> str:
    """The page with its includes of README.rst resolved, as Sphinx shows it."""
    path = ROOT / "docs" / page

    def resolve(found: re.Match[str]) -> str:
        included = (path.parent / found[1]).read_text()
        return included.split(found[2], 1)[1].split(found[3], 1)[0]
    return INCLUDE.sub(resolve, path.read_text())


def blocks_of(page: str) -> list[Block]:
    text = page_text(page)
    reasons = {found.end(): " ".join(found[1].split()) for found in EXCERPT.finditer(text)}
    assert len(reasons) == len(STRAY_EXCERPT.findall(text)), (
        f"{page}: an '.. excerpt:' comment must come right before a code block")
    assert all(reasons.values()), f"{page}: an '.. excerpt:' without its reason"
    return [Block(page, text.count("\n", 0, found.start()) + 1, found[1],
                  textwrap.dedent(found[2]).strip("\n") + "\n", reasons.get(found.start()))
            for found in DIRECTIVE.finditer(text)]


def logical_lines(code: str) -> list[str]:
    """Lines with their backslash continuations joined; comments and blanks left out."""
    joined = code.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not
            line.lstrip().startswith("#")]


# -- one page's directory, ports and nodes --------------------------------------------------

@dataclass
class Node:
    command: str  # the start line as the page gives it
    process: subprocess.Popen[bytes]
    log: Path
    monitors: list[str]
    curve: bool  # its monitor answers only clients with a key it admits


@dataclass
class Page:
    name: str
    directory: Path
    node: Node | None = None

    @cached_property
    def ports(self) -> int:
        return block_of_ports(len(DOC_PORTS))

    @cached_property
    def cluster_ports(self) -> int:
        return block_of_ports(len(CLUSTER_PORTS))

    # the one rewrite --------------------------------------------------------------------

    def moved(self, text: str) -> str:
        text = ENDPOINT_PORT.sub(self._move_port, text)
        return text.replace("ipc:///tmp/", f"ipc://{self.directory}/")

    def _move_port(self, found: re.Match[str]) -> str:
        port = int(found[2])
        for docs, base in ((DOC_PORTS, self.ports), (CLUSTER_PORTS, self.cluster_ports)):
            if port in docs:
                return f"{found[1]}:{base + port - docs.start}"
        raise AssertionError(f"{self.name}: port {port} is outside the ports the examples "
                             "may use (11130-11159, 21130-21159): add its range here")

    def command_line(self, line: str) -> str:
        line = TOOL.sub(self._tool_default, self.moved(line))
        line = re.sub(r"(?<![\w/.-])\.venv/bin/", f"{BIN}/", line)
        return re.sub(r"(?<![\w/.-])scripts/", f"{ROOT}/scripts/", line)

    def _tool_default(self, found: re.Match[str]) -> str:
        rest = found["rest"]
        if "--dsn" in rest or "--routes" in rest:
            return found[0]
        default = (TOOL_DEFAULTS.get(found["name"]) or
                   (DEFAULT_CONSUME if "--group" in rest else DEFAULT_SEND))
        return f"{found['tool']} --dsn {self.moved(default)}{rest}"

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                "PZQ_VENV": sys.prefix, "PZQ_CLUSTER_DIR": str(self.directory / "local-cluster"),
                "PZQ_CLUSTER_BASE_PORT": self.moved("tcp://h:21130").rpartition(":")[2]}

    # nodes ------------------------------------------------------------------------------

    def start(self, command: str) -> None:
        """A start line's node(s), in the background, once ready; the page's running
        node is stopped first unless it is the one this line starts."""
        if self.node is not None and self.node.command == command:
            return
        self.stop()
        own = shlex.split(command, comments=True)
        own = own[:-1] if own and own[-1] == "&" else own
        given = [self.moved(arg) for arg in own[1:]]
        defaults = [item for flag, dsn in NODE_DEFAULTS for item in (flag, self.moved(dsn))]
        if "--shards" in given:
            defaults += ["--broadcast-dsn", self.moved(BASE_BROADCAST)]
        argv = [*defaults, *given]
        config = parse_config(argv)
        shards = plan_shards(config) if config.shards > 1 else []
        monitors = ([shard.config.endpoints[MONITOR.role] for shard in shards]
                    or [config.endpoints[MONITOR.role]])
        log = self.directory / f"node-{len(list(self.directory.glob('node-*.log')))}.log"
        with log.open("wb") as output:
            process = subprocess.Popen([str(BIN / "pzq"), *argv], cwd=self.directory,
                                       stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                       env=self.environment(), start_new_session=True)
        self.node = Node(command, process, log, monitors, config.curve_secret_key is not None)
        wait_until(lambda: self._ready(len(monitors)), 30, interval=0.05,
                   message=f"{self.name}: the node of '{command}'")

    def _ready(self, shards: int) -> bool:
        assert self.node is not None
        if self.node.process.poll() is not None:
            raise AssertionError(f"{self.name}: '{self.node.command}' exited "
                                 f"{self.node.process.returncode}:\n{self.log_tail()}")
        return self.node.log.read_text(errors="replace").count("node_ready") >= shards

    def settle(self) -> None:
        """Nothing in flight, no ACK owed to a producer, the archive fsync'd to its end
        (a CURVE node's own block checked it with its keys)."""
        for monitor in self.node.monitors if self.node and not self.node.curve else []:
            wait_until(lambda monitor=monitor: settled(monitor), 20, interval=0.05,
                       message=f"{self.name}: {monitor} settled")

    def stop(self) -> None:
        if self.node is None:
            return
        process, self.node = self.node.process, None
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def log_tail(self) -> str:
        if self.node is None:
            return ""
        return "\n".join(self.node.log.read_text(errors="replace").splitlines()[-30:])

    def close(self) -> None:
        self.stop()
        if (self.directory / "local-cluster").exists():  # a block that failed before its stop
            subprocess.run([str(ROOT / "scripts" / "local-cluster"), "stop"], timeout=60,
                           env=self.environment(), capture_output=True, check=False)


def settled(monitor: str) -> bool:
    stats = json.loads(request_monitor(monitor, "STATS", 10))
    groups = [group for topic in stats["topics"].values()
              for group in topic["groups"].values()]
    archive = stats.get("archive") or {"topics": {}}
    return (stats["messages_inflight"] == 0 and stats["pending_producer_acks"] == 0
            and all(group.get("inflight", 0) == 0 for group in groups)
            and all(topic["flushed_offset"] == topic["last_offset"]
                    for topic in archive["topics"].values()))


# -- running the blocks ------------------------------------------------------------------

def run_page(page: Page, blocks: list[Block], prelude: str | None = None) -> None:
    runnable = [block for block in blocks if not block.excerpt]
    if prelude is not None:
        page.start(prelude)
    for number, block in enumerate(runnable):
        assert block.language in ("python", "sh", "toml"), (
            f"{block.where()}: run it here, or mark it '.. excerpt: <why>'")
        page.settle()
        if block.language == "sh":
            run_sh(page, block)
        elif block.language == "toml":
            read_as_config(page, block, number)
        else:
            run_python(page, block, number)


def run_sh(page: Page, block: Block) -> None:
    for line in logical_lines(block.code):
        if STARTS_NODE.match(line):
            page.start(line)
            continue
        command = page.command_line(line)
        ran = subprocess.run(["bash", "-c", f"set -euo pipefail\n{command}"],
                             cwd=page.directory, env=page.environment(), capture_output=True,
                             text=True, timeout=LINE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                             check=False)
        assert ran.returncode == 0, failure(page, block, line, command, ran)


def read_as_config(page: Page, block: Block, number: int) -> None:
    """A node's config file, or an --authorization file (its tables say which), read as
    the node reads it."""
    path = page.directory / f"block-{number}.toml"
    path.write_text(block.code)
    rules = re.search(r"^\[(default|clients\.)", block.code, flags=re.MULTILINE)
    try:
        (load_rules if rules else read_config_file)(path)
    except ConfigError as exc:
        raise AssertionError(f"{block.where()}: {exc}") from None


def run_python(page: Page, block: Block, number: int) -> None:
    script = page.directory / f"block-{number}.py"
    script.write_text(page.moved(block.code))
    try:
        compile(block.code, str(script), "exec")
    except SyntaxError as exc:  # e.g. await outside a function
        raise AssertionError(f"{block.where()} is not a script python runs: {exc}") from None
    ran = subprocess.run([sys.executable, str(script)], cwd=page.directory,
                         env=page.environment(), capture_output=True, text=True,
                         timeout=LINE_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
    assert ran.returncode == 0, failure(page, block, "", str(script), ran)


def failure(page: Page, block: Block, line: str, command: str,
            ran: subprocess.CompletedProcess[str]) -> str:
    return (f"{block.where()} failed (exit {ran.returncode})"
            + (f" at: {line}" if line else "") + f"\nran: {command}\n"
            f"stdout:\n{ran.stdout[-3000:]}\nstderr:\n{ran.stderr[-3000:]}\n"
            f"node log:\n{page.log_tail()}")


@pytest.fixture
def page_of(tmp_path: Path) -> Iterator[Callable[[str], Page]]:
    opened: list[Page] = []

    def make(name: str) -> Page:
        directory = tmp_path / name.removesuffix(".rst")
        directory.mkdir()
        opened.append(Page(name, directory))
        return opened[-1]
    yield make
    for page in opened:
        page.close()


# -- the tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAGES)
def test_every_example_of_the_page_runs_as_written(name, page_of):
    run_page(page_of(name), blocks_of(name), PRELUDE.get(name))


def test_the_group_examples_agree_in_either_order(page_of):
    """The Python example run before the command line's (the page has the other order),
    on the node the command line starts."""
    sh, python, *rest = [block for block in blocks_of("groups.rst") if not block.excerpt]
    assert (sh.language, python.language) == ("sh", "python")
    start = next(line for line in logical_lines(sh.code) if STARTS_NODE.match(line))
    run_page(page_of("groups.rst"), [python, sh, *rest], start)


@pytest.mark.timeout(20)
def test_what_is_not_run_says_why_and_what_runs_reaches_only_its_own_nodes(tmp_path):
    page = Page("check", tmp_path)
    for name in PAGES:
        for block in blocks_of(name):  # an excerpt comment without a reason fails here
            if block.excerpt is None:
                moved = page.command_line(block.code)  # a port it cannot move fails here
                assert "ipc:///tmp/pzq-" not in moved, block.where()


@pytest.mark.timeout(20)
def test_every_page_with_a_code_block_is_run_here():
    pages = [path for path in sorted((ROOT / "docs").rglob("*.rst"))
             if "_build" not in path.parts and ".. code-block::" in path.read_text()]
    assert [str(path.relative_to(ROOT / "docs")) for path in pages
            if path.name not in PAGES] == []


@pytest.mark.timeout(120)
def test_the_asyncio_pages_service_code_type_checks_strictly(tmp_path):
    """pzq ships its annotations, so the page's service code (the worker, the request
    handler) must pass ``mypy --strict`` as a user's service would be checked: a bare
    ``asyncio.Task`` or ``dict`` there is an error. The application's own calls are
    given types of their own."""
    application = ("import asyncio\n"
                   "from pzq import aio\n"
                   "producer: aio.Producer\n"
                   "class PermanentError(Exception): ...\n"
                   "async def bill(parts: tuple[bytes, ...]) -> None: ...\n"
                   "def order_id(body: bytes) -> str: return body.hex()\n")
    service = [block.code for block in blocks_of("asyncio.rst")
               if block.language == "python" and ("class OrderWorker" in block.code
                                                  or "async def place_order" in block.code)]
    assert len(service) == 2
    checked = tmp_path / "service.py"
    checked.write_text(application + "\n".join(service))
    found = subprocess.run([BIN / "mypy", "--strict", "--no-incremental", "--config-file",
                            os.devnull, str(checked)], cwd=ROOT, capture_output=True,
                           text=True, timeout=110)
    assert found.returncode == 0, found.stdout
