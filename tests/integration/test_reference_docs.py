"""The generated and checked references of docs/reference/ say what the code does.

STATS and the exporter's metrics come from a real node with every part on (archive,
ZPER endpoints, a peer, a partitioned topic, a consumer group with a consumer
connected, a backup): a field or a metric family without an entry in its page fails
here. The tools' pages are generated from each tool's parser: every console script
must have one. The log events and the Spark options are checked both ways when the
docs are built (docs/_ext/pzq_reference.py); the same check runs here, without Sphinx.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import zmq

import pzq.client
from pzq.client import GroupConsumer, Producer, request_monitor
from tests.support.harness import scrape_metrics, wait_until
from tests.support.ports import block_of_ports

ROOT = Path(__file__).parents[2]
REFERENCE = ROOT / "docs" / "reference"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import pzq_reference  # noqa: E402  (the docs' own extension, not a package)

# A dict under one of these keys is keyed by a name, shown as a placeholder in the page.
NAMED = {"topics": "<topic>", "groups": "<group>", "taken_over": "<origin>",
         "buckets": "<le>"}
DOCUMENTED_ROW = re.compile(r"^   \* - ``([^`]+)``$", re.M)
# a row of the metrics page: the family, then its type (gauge, counter, histogram)
DOCUMENTED_TYPE = re.compile(r"^   \* - ``(pzq_\w+)``\n     - (\w+)$", re.M)


def field_paths(value: object, path: str = "", key: str = "") -> set[str]:
    """Every leaf of a STATS answer as ``a.b.<topic>.c``, a list of objects as ``[]``."""
    if isinstance(value, dict):
        if key in NAMED:
            return {found for item in value.values()
                    for found in field_paths(item, f"{path}.{NAMED[key]}")}
        return {found for name, item in value.items()
                for found in field_paths(item, f"{path}.{name}" if path else name, name)}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {found for item in value for found in field_paths(item, f"{path}[]")}
    return {path}


def documented(page: str) -> set[str]:
    return set(DOCUMENTED_ROW.findall((REFERENCE / page).read_text()))


@pytest.fixture(scope="module")
def busy_node(tmp_path_factory):
    """A node of a two-node cluster with every part on, a group's consumer connected,
    a backup done, and its STATS and one scrape of it taken then."""
    from tests.support.harness import NodeProcess

    base, tmp = block_of_ports(2), tmp_path_factory.mktemp("reference")
    here, peer = f"tcp://127.0.0.1:{base}", f"tcp://127.0.0.1:{base + 1}"
    any_port = "tcp://127.0.0.1:*"
    rules = tmp / "authorization.toml"  # everything allowed: its figures in STATS
    rules.write_text('[default]\nproduce = ["*"]\nconsume = ["*:*"]\nadmin = true\n')
    node = NodeProcess(tmp / "a", "--authorization", str(rules), "--archive-dir",
                       str(tmp / "archive"), "--archive-dsn", any_port, "--zper-writer-dsn",
                       any_port, "--zper-ack-dsn", any_port,
                       "--zper-relay-dsn", any_port, "--broadcast-dsn", here, "--nodes", peer,
                       "--replicas", "1", "--partitions", "orders=2", consume=True).start()
    other = NodeProcess(tmp / "b", "--broadcast-dsn", peer, "--nodes", here,
                        consume=True).start()
    context = zmq.Context()
    try:
        node.wait_stats(lambda stats: stats["peers"][0]["state"] == "up", 20, "the peer")
        with Producer(node.receive_dsn, context=context) as producer:
            for number in range(3):
                producer.send([b"%d" % number], headers=[b"TOPIC:clicks"])
            acked: list[object] = []
            wait_until(lambda: acked.extend(producer.acks(0.1)) or len(acked) == 3, 20,
                       message="the producer's ACKs")
        assert node.ask(f"BACKUP {tmp / 'backup'}").startswith("backup: ")
        node.wait_stats(lambda stats: stats["backup"]["state"] == "done", 60, "the backup")
        with GroupConsumer(node.dsn("consume"), "clicks", "audit", context=context) as group:
            group.receive(20).ack()
            held = group.receive(20)  # one held unacked: the consumer's figures show it
            stats = json.loads(request_monitor(node.monitor_dsn, "STATS", 10))
            metrics = scrape_metrics(node.monitor_dsn)
            held.ack()
        yield stats, metrics
    finally:
        context.destroy(linger=0)
        other.stop()
        node.stop()


@pytest.mark.timeout(120)
def test_every_stats_field_has_an_entry_with_its_unit(busy_node):
    stats, _ = busy_node
    fields = field_paths(stats)
    assert {"topics.<topic>.groups.<group>.consumer_list[].held", "backup.phase",
            "peers[].protocol", "zper.relay.clients",
            "authorization.reloads"} <= fields  # every part was on
    assert sorted(fields - documented("stats.rst")) == []


@pytest.mark.timeout(120)
def test_every_exporter_metric_has_an_entry(busy_node):
    _, metrics = busy_node
    families = set(re.findall(r"^# TYPE (pzq_\w+) ", metrics, re.M))
    assert {"pzq_up", "pzq_group_backlog", "pzq_zper_relay_clients"} <= families
    assert sorted(families - documented("metrics.rst")) == []


@pytest.mark.timeout(120)
def test_the_monitoring_page_names_every_exporter_metric(busy_node):
    """The monitoring page's list by subject is the one an operator reads: nine
    families (pzq_lag_seconds, pzq_replicas_held, pzq_ttl_expired_total, ...) were
    served and only the generated page named them. The per topic and per group
    families are named there by their prefixes."""
    _, metrics = busy_node
    families = set(re.findall(r"^# TYPE (pzq_\w+) ", metrics, re.M))
    page = (ROOT / "docs" / "monitoring.rst").read_text()
    named = set(re.findall(r"``(pzq_\w+)", page))
    assert "``pzq_topic_*`` and ``pzq_group_*`` series" in page
    assert sorted(family for family in families - named
                  if not family.startswith(("pzq_topic_", "pzq_group_"))) == []


@pytest.mark.timeout(120)
def test_every_exporter_metric_has_the_type_its_entry_says(busy_node):
    """A count since the start is a counter (``_total``, rate() and increase() work on
    it and take a restart as a reset), a level a gauge: as the page says."""
    _, metrics = busy_node
    exported = dict(re.findall(r"^# TYPE (pzq_\w+) (\w+)$", metrics, re.M))
    types = dict(DOCUMENTED_TYPE.findall((REFERENCE / "metrics.rst").read_text()))
    assert {family: (kind, types.get(family)) for family, kind in exported.items()
            if types.get(family) != kind} == {}
    counters = [family for family, kind in exported.items() if kind == "counter"]
    assert [family for family in counters if not family.endswith("_total")] == []


@pytest.mark.timeout(10)
def test_every_tool_has_its_generated_options():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    page = (REFERENCE / "tools.rst").read_text()
    generated = re.findall(r"^\.\. pzq-tool-options:: (\S+)$", page, re.M)
    modules = {target.partition(":")[0] for target in generated}
    assert {entry.partition(":")[0] for entry in scripts.values()} == modules
    for tool in scripts:
        assert re.search(rf"^{re.escape(tool)}( \(the node\))?\n-+$", page, re.M), tool


@pytest.mark.timeout(10)
@pytest.mark.parametrize("package", ["pzq.client", "pzq.aio"])
def test_every_name_a_client_package_exports_is_in_the_api_reference(package):
    module = importlib.import_module(package)
    page = (REFERENCE / "api.rst").read_text()
    shown = set(re.findall(rf"^\.\. auto\w+:: {re.escape(package)}\.(\w+)$", page, re.M))
    # the aio package's own names, and what it shares with the sync one, said once
    shared = {name for name in module.__all__ if package == "pzq.aio"
              and getattr(module, name) is getattr(pzq.client, name, None)
              and f"``{name}``" in page.split("The asyncio clients", 1)[1]}
    assert sorted(set(module.__all__) - shown - shared) == []


@pytest.mark.timeout(20)
@pytest.mark.parametrize("page, found", [
    ("logs.rst", lambda: pzq_reference.log_events()),
    ("api.rst", lambda: pzq_reference.spark_options()),
])
def test_every_log_event_and_spark_option_has_its_meaning_and_no_other(page, found):
    text = (REFERENCE / page).read_text()
    content = text.split(".. pzq-", 1)[1].split("\n\n", 1)[1]
    lines = []
    for line in content.splitlines():
        if line.strip() and not line.startswith("   "):
            break  # the directive's content ends
        lines.append(line[3:])
    assert pzq_reference.unmatched(found(), pzq_reference.meanings(lines)) == ([], [])


@pytest.mark.timeout(10)
def test_every_metric_the_pages_name_is_a_family_of_the_metrics_page():
    """A metric named in prose (``pzq_forbidden_total``) is one the exporter serves: the
    metrics page lists every family the exporter serves (checked above)."""
    families = {name for name in documented("metrics.rst") if name.startswith("pzq_")}
    histograms = {f"{name}{suffix}" for name in families
                  for suffix in ("_bucket", "_count", "_sum")}
    pages = [*ROOT.joinpath("docs").glob("*.rst"), *REFERENCE.glob("*.rst"),
             ROOT / "README.rst"]
    named = {(page.name, name) for page in pages
             for name in re.findall(r"``(pzq_[a-z_]+)(?:\{[^`]*\})?``", page.read_text())}
    not_metrics = {"pzq_backup"}  # the backup manifest's layout key
    assert sorted((page, name) for page, name in named
                  if name not in families | histograms | not_metrics) == []
