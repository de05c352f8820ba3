"""pzq --shards N: each shard's store, endpoints and peers, and the layouts refused."""

from __future__ import annotations

import pytest

from pzq.errors import ConfigError
from pzq.node.main import parse_config
from pzq.node.options import build_config
from pzq.node.shard_layout import plan_shards, shard_endpoint

pytestmark = pytest.mark.timeout(10)


def plan(**values):
    return plan_shards(build_config(values))


def test_the_defaults_step_every_tcp_port_by_ten_and_suffix_ipc_paths():
    shards = plan(shards=3)
    assert [tuple(s.config.endpoints[role] for role in ("receive", "send", "monitor"))
            for s in shards] == [
        ("tcp://*:11131", "tcp://*:11132", "ipc:///tmp/pzq-monitor-0"),
        ("tcp://*:11141", "tcp://*:11142", "ipc:///tmp/pzq-monitor-1"),
        ("tcp://*:11151", "tcp://*:11152", "ipc:///tmp/pzq-monitor-2")]
    assert [s.config.database for s in shards] == [
        "pzq-data/shard-0", "pzq-data/shard-1", "pzq-data/shard-2"]
    assert all(s.config.shards == 1 and "consume" not in s.config.endpoints for s in shards)


def test_the_shards_are_one_cluster_with_the_nodes_given():
    shards = plan(shards=3, replicas=2, nodes=("tcp://far:7000",))
    assert [s.config.endpoints["cluster"] for s in shards] == [
        "tcp://127.0.0.1:11134", "tcp://127.0.0.1:11144", "tcp://127.0.0.1:11154"]
    assert shards[1].config.nodes == (
        "tcp://127.0.0.1:11134", "tcp://127.0.0.1:11154", "tcp://far:7000")
    assert all(s.config.replicas == 2 for s in shards)


def test_a_broadcast_dsn_given_is_the_base_of_the_shards():
    shards = plan(shards=2, broadcast_dsn="ipc:///run/pzq-cluster")
    assert [s.config.endpoints["cluster"] for s in shards] == [
        "ipc:///run/pzq-cluster-0", "ipc:///run/pzq-cluster-1"]
    assert shards[0].config.nodes == ("ipc:///run/pzq-cluster-1",)


def test_every_bound_endpoint_and_the_archive_are_the_shards_own():
    shards = plan(shards=2, consume_dsn="tcp://127.0.0.1:9005", archive_dir="arch",
                  archive_dsn="tcp://127.0.0.1:*", zper_writer_dsn="ipc://*",
                  zper_relay_dsn="inproc://relay")
    second = shards[1].config
    assert (second.endpoints["consume"], second.archive_dir, second.endpoints["archive"]) == (
        "tcp://127.0.0.1:9015", "arch/shard-1", "tcp://127.0.0.1:*")
    assert (second.endpoints["zper_writer"], second.endpoints["zper_relay"]) == (
        "ipc://*", "inproc://relay")


@pytest.mark.parametrize(("dsn", "shard", "expected"), [
    ("tcp://[::1]:7000", 2, "tcp://[::1]:7020"),
    ("tcp://eth0:7000", 1, "tcp://eth0:7010"),
    ("ipc:///tmp/a.sock", 1, "ipc:///tmp/a.sock-1"),
])
def test_shard_endpoint(dsn, shard, expected):
    assert shard_endpoint(dsn, shard, "--receive-dsn") == expected


def test_the_command_line_of_a_shard_wins_over_the_supervisors_and_its_file(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text('database = "filed"\nshards = 2\nreceive-dsn = "tcp://*:9001"\n')
    given = ["--config", str(path), "--send-dsn", "tcp://*:9002", "--hard-sync"]
    shard = plan_shards(parse_config(given))[1]
    child = parse_config([*given, *shard.arguments()])
    assert child == shard.config
    assert (child.database, child.endpoints["receive"], child.endpoints["send"],
            child.hard_sync, child.shards) == (
        "filed/shard-1", "tcp://*:9011", "tcp://*:9012", True, 1)


@pytest.mark.parametrize(("values", "message"), [
    ({"receive_dsn": "tcp://*:9001", "send_dsn": "tcp://*:9011"},
     "shard 1's --receive-dsn tcp://*:9011 would bind where shard 0's --send-dsn "
     "tcp://*:9011 does; shard K adds 10*K to every tcp port"),
    ({"monitor_dsn": "tcp://127.0.0.1:9020", "broadcast_dsn": "tcp://127.0.0.1:9000"},
     "shard 2's --broadcast-dsn tcp://127.0.0.1:9020 would bind where shard 0's "
     "--monitor-dsn tcp://127.0.0.1:9020 does"),
    ({"receive_dsn": "tcp://*:65530"}, "shard 1: --receive-dsn 'tcp://*:65540' needs a port"),
    ({"broadcast_dsn": "tcp://*:9004"}, "--shards needs a --broadcast-dsn the shards can "
     "connect to, such as tcp://127.0.0.1:11134, not tcp://*:9004"),
    ({"broadcast_dsn": "tcp://127.0.0.1:*"}, "not tcp://127.0.0.1:*"),
    ({"send_dsn": "ws://127.0.0.1:9002"}, "tcp:// and ipc:// endpoints only, not --send-dsn"),
    ({"nodes": ("tcp://127.0.0.1:11144",)}, "--nodes tcp://127.0.0.1:11144 is shard 1's "
     "cluster endpoint: --nodes lists the nodes besides the shards"),
])
def test_layouts_that_cannot_run_are_refused_in_one_line(values, message):
    with pytest.raises(ConfigError) as refused:
        plan(shards=3, **values)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_replicas_count_the_other_shards_and_the_nodes_given():
    assert plan(shards=2, replicas=1)
    assert plan(shards=2, replicas=2, nodes=("tcp://10.0.0.2:11134",))
    # in the shards' terms, where a shard's check said "needs at least that many --nodes
    # (got 1)" of --nodes never given
    with pytest.raises(ConfigError, match=r"^--shards 2 --replicas 2: a shard's copies go to "
                                          r"the other shards and the --nodes given, 1 here: "
                                          r"give --replicas 1 at most, or more --shards or "
                                          r"--nodes$"):
        plan(shards=2, replicas=2)


def test_shards_refuse_per_node_cluster_keys(tmp_path):
    with pytest.raises(ConfigError, match="--shards cannot take --cluster-authorized-keys"):
        build_config({"shards": 2, "cluster_authorized_keys": str(tmp_path),
                      "curve_secret_key": "k", "curve_authorized_keys": "d"})


def test_shards_must_be_one_or_more():
    with pytest.raises(ConfigError, match="--shards must be greater than 0"):
        build_config({"shards": 0})
