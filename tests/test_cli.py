"""Options: defaults < config file < command line, and one clear line for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import run_pzq

from pzq.cli import EXIT_BIND, EXIT_USAGE, parse_config
from pzq.config import build_config, defaults, read_config_file
from pzq.errors import ConfigError

pytestmark = pytest.mark.timeout(30)
EXAMPLE = Path(__file__).parent.parent / "config" / "pzq.toml"


def test_defaults_are_the_original_pzqs():
    config = parse_config([])
    assert config.ack_timeout == 5_000_000
    assert config.reaper_frequency == 2_500_000
    assert config.inflight_size == 31_457_280
    assert config.hard_sync is False
    assert (config.receive_dsn, config.send_dsn, config.monitor_dsn) == (
        "tcp://*:11131", "tcp://*:11132", "ipc:///tmp/pzq-monitor")
    assert (config.replicas, config.nodes, config.timeout_nodes,
            config.timeout_replication) == (0, (), 10_000_000, 100_000)


def test_the_example_config_file_holds_the_defaults():
    values = read_config_file(EXAMPLE)
    assert {name: values[name] for name in values} == {
        name: defaults()[name] for name in values}


def test_cli_beats_file_beats_defaults(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text('ack-timeout = 7000000\nhard_sync = true\nnodes = "tcp://a:1, tcp://b:2"\n'
                    'broadcast-dsn = "tcp://127.0.0.1:5000"\n')
    config = parse_config(["--config", str(path), "--ack-timeout", "9000000"])
    assert config.ack_timeout == 9_000_000
    assert config.hard_sync is True
    assert config.nodes == ("tcp://a:1", "tcp://b:2")
    assert config.reaper_frequency == 2_500_000


@pytest.mark.parametrize("content, message", [
    ("bogus = 1\n", "unknown option 'bogus'"),
    ("ack-timeout = 'soon'\n", "wrong type"),
    ("hard-sync = 1\n", "wrong type"),
    ("ack-timeout = \n", "could not be read"),
])
def test_bad_config_file(tmp_path, content, message):
    path = tmp_path / "pzq.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        build_config({}, path)


@pytest.mark.parametrize("values, message", [
    ({"ack_timeout": 0}, "--ack-timeout must be greater than 0"),
    ({"inflight_size": -1}, "--inflight-size must be greater than 0"),
    ({"receive_dsn": "localhost:11131"}, "not a ZeroMQ endpoint"),
    ({"log_level": "loud"}, "--log-level must be one of"),
    ({"replicas": 1}, "--replicas 1 needs at least that many --nodes"),
    ({"nodes": ("tcp://a:1",)}, "--nodes needs --broadcast-dsn"),
    ({"nodes": ("tcp://a:1", "tcp://a:1"), "broadcast_dsn": "tcp://b:1"}, "same endpoint twice"),
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "tcp://a:1"}, "not this node's"),
    ({"replicas": -1}, "--replicas must be 0 or more"),
])
def test_invalid_values(values, message):
    with pytest.raises(ConfigError, match=message):
        build_config(values)


@pytest.mark.parametrize("args, message", [
    (["--ack-timeout", "-5"], "--ack-timeout must be greater than 0"),
    (["--ack-timeout", "soon"], "invalid int value"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--log-format", "xml"], "--log-format must be one of"),
    (["--config", "/nonexistent/pzq.toml"], "does not exist"),
    (["--replicas", "2", "--nodes", "tcp://127.0.0.1:1", "--broadcast-dsn", "tcp://127.0.0.1:2"],
     "--replicas 2 needs at least that many --nodes"),
])
def test_bad_option_is_one_line_and_exit_2(args, message):
    result = run_pzq(args)
    assert result.returncode == EXIT_USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pzq: error: ") and message in lines[0]


def test_endpoint_in_use_is_exit_4(node, tmp_path):
    result = run_pzq(["--database", str(tmp_path / "other"), "--receive-dsn", node.receive_dsn,
                      "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == EXIT_BIND
    assert "cannot bind --receive-dsn" in result.stderr


def test_graceful_stop_exits_0_and_keeps_messages(node, producer):
    assert producer.produce([b"kept"]).ok
    assert node.stop() == 0
    assert node.event("node_stopped")["messages"] == 1
    node.restart()
    assert node.figures()["messages"] == 1


def test_help_lists_every_option():
    result = run_pzq(["--help"])
    assert result.returncode == 0
    for flag in ("--database", "--ack-timeout", "--reaper-frequency", "--hard-sync",
                 "--inflight-size", "--receive-dsn", "--send-dsn", "--monitor-dsn", "--replicas",
                 "--nodes", "--timeout-nodes", "--broadcast-dsn", "--timeout_replication",
                 "--config", "--max-message-size", "--log-level", "--log-format"):
        assert flag in result.stdout
