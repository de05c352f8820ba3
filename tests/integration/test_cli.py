"""Options: defaults < config file < command line, and one clear line for bad ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pzq.client import Consumer, Producer
from pzq.errors import ConfigError, ExitCode
from pzq.node.main import parse_config
from pzq.node.options import OPTIONS, TOML_WANTED, build_config, defaults, read_config_file
from tests.support.harness import run_pzq

EXIT_BIND, EXIT_STORE, EXIT_USAGE = ExitCode.BIND, ExitCode.STORE, ExitCode.USAGE

pytestmark = pytest.mark.timeout(30)
EXAMPLE = Path(__file__).parents[2] / "config" / "pzq.toml"


def test_defaults_are_the_original_pzqs():
    config = parse_config([])
    assert config.ack_timeout_us == 5_000_000
    assert config.reaper_period_us == 2_500_000
    assert config.inflight_size == 31_457_280
    assert config.hard_sync is False
    assert (config.endpoints["receive"], config.endpoints["send"],
            config.endpoints["monitor"]) == (
        "tcp://*:11131", "tcp://*:11132", "ipc:///tmp/pzq-monitor")
    assert (config.replicas, config.nodes, config.timeout_nodes_us,
            config.timeout_replication_us) == (0, (), 10_000_000, 100_000)


# ``# name = value  # ... (off unless set)``: an option whose default is "off" (None),
# which TOML cannot write, shown commented out with an example value.
COMMENTED_OUT = re.compile(r"^#\s*([a-z][a-z_-]*)\s*=\s*(.+?)\s+#.*\boff unless set\b", re.M)


def test_the_example_config_file_holds_every_option_at_its_default(tmp_path):
    """config/pzq.toml names every option of the node: set to its default, or, for an
    option off unless set, commented out with an example the node would take."""
    values = read_config_file(EXAMPLE)
    assert values == {name: defaults()[name] for name in values}
    text = EXAMPLE.read_text()
    off = {found[1].replace("-", "_"): found[2] for found in COMMENTED_OUT.finditer(text)}
    assert not set(off) & set(values), "an option both set and commented out"
    assert {name for name in off if defaults()[name] is not None} == set(), (
        "only an option off unless set (no default TOML can write) may be commented out")
    missing = set(defaults()) - set(values) - set(off)
    assert not missing, f"config/pzq.toml lacks {sorted(missing)}"
    example = tmp_path / "example.toml"  # each example value is one the node would take
    example.write_text("".join(f"{name} = {value}\n" for name, value in off.items()))
    assert set(read_config_file(example)) == set(off)


def test_the_example_config_file_gives_each_endpoint_its_own_port():
    """Every endpoint of config/pzq.toml, those commented out too, on a port of its own
    and on the port docs/deploying.rst gives it: uncommented together they all bind."""
    ports = re.findall(r'^#?\s*([a-z-]+-dsn) = "tcp://[^"]*:(\d+)"', EXAMPLE.read_text(), re.M)
    assert len({port for _, port in ports}) == len(ports), ports
    table = (EXAMPLE.parents[1] / "docs" / "deploying.rst").read_text()
    for option, port in ports:
        assert re.search(rf"^``--{option}``\s+{port}\s", table, re.M), (option, port)


def test_cli_beats_file_beats_defaults(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text('ack-timeout = 7000000\nhard_sync = true\nnodes = "tcp://a:1, tcp://b:2"\n'
                    'broadcast-dsn = "tcp://127.0.0.1:5000"\n')
    config = parse_config(["--config", str(path), "--ack-timeout", "9000000"])
    assert config.ack_timeout_us == 9_000_000
    assert config.hard_sync is True
    assert config.nodes == ("tcp://a:1", "tcp://b:2")
    assert config.reaper_period_us == 2_500_000


@pytest.mark.parametrize("content, message", [
    ("bogus = 1\n", "unknown option 'bogus'"),
    ("ack-timeout = 'soon'\n", "ack-timeout: soon is not a duration: give microseconds"),
    ("ack-timeout = 1.5\n", 'give whole microseconds or a text with a unit, e.g. "1.5s"'),
    ("ack-timeout = \n", "pzq.toml, line 1: Invalid value (column 15)"),
    # a refused type says what the option takes, naming it as the file does
    ("hard-sync = 1\n", "hard-sync has the wrong type (1): give true or false"),
    ("prefetch = '10'\n", "prefetch has the wrong type ('10'): give a whole number"),
    ("send_dsn = 5\n", "send_dsn has the wrong type (5): give a text in quotes"),
    ("ack-timeout = true\n", "ack-timeout has the wrong type (True): give whole microseconds or a "
                             'text with a unit, e.g. "5s"'),
    ("nodes = 5\n", 'nodes has the wrong type (5): give a text of endpoints separated by "," '
                    "or a list of texts"),
    # a value out of range is named as the file spells it, not as its command-line flag
    ("max-bytes = -1\n", "pzq.toml: max-bytes must be 0 or more"),
    ("max_bytes = -1\n", "pzq.toml: max_bytes must be 0 or more"),
    ("log-format = 'xml'\n", "pzq.toml: log-format must be one of"),
    ("consume_heartbeat = '25h'\n", "pzq.toml: consume_heartbeat must be at most 1d"),
    # a whole configuration's refusal names the file and its keys, not flags never typed
    ("receive-dsn = 'tcpx://nowhere'\n",
     "pzq.toml: receive-dsn 'tcpx://nowhere' is not a ZeroMQ endpoint"),
    ("nodes = ['n1=tcp://10.0.0.2:11134']\n",
     "pzq.toml: nodes needs broadcast-dsn, this node's own cluster endpoint"),
    ("replicas = 1\n", "pzq.toml: replicas 1 needs at least that many nodes (got 0)"),
    ("curve-secret-key = 'keys/n0.key_secret'\n",
     "pzq.toml: curve-secret-key and curve-authorized-keys go together"),
    ("partitions = 'orders=x'\n", "pzq.toml: partitions orders=x: give NAME=COUNT"),
    ("archive_topic = ''\n", "pzq.toml: archive_topic: topic '' must be"),
    # one option under both its spellings: which value was meant cannot be told
    ("ack_timeout = '5s'\nack-timeout = '6s'\n",
     "ack_timeout and ack-timeout are one option: give it once"),
])
def test_bad_config_file(tmp_path, content, message):
    path = tmp_path / "pzq.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config({}, path)


# TOML syntax errors in the form of the file's other mistakes, not tomllib's wording
@pytest.mark.parametrize("content, said", [
    ('prefetch = 10\nlog-format = "json\n', 'line 2: a text in quotes is not closed on its line'),
    ("prefetch = 10\n\n[cluster\nreplicas = 1\n",
     "line 3: Expected ']' at the end of a table declaration (column 9)"),
    ("prefetch = 10\nreplicas = 0\nprefetch = 20\n",
     "line 3: prefetch is given twice: give it once"),
    ('nodes = ["tcp://a:1",\n', "line 1: Invalid value (the file ends first)"),
])
def test_a_toml_syntax_error_names_the_line_in_pzqs_form(tmp_path, content, said):
    path = tmp_path / "pzq.toml"
    path.write_text(content)
    result = run_pzq(["--config", str(path)])
    assert result.returncode == EXIT_USAGE
    assert result.stderr.strip().splitlines() == [f"pzq: error: config file {path}, {said}"]


def test_a_whole_configuration_s_refusal_names_a_flag_as_the_flag(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text("database = 'store'\n")
    with pytest.raises(ConfigError, match=re.escape(
            "--replicas 1 needs at least that many --nodes (got 0)")) as refused:
        build_config({"replicas": 1}, path)
    assert "config file" not in str(refused.value)


def test_a_flag_that_beats_the_file_is_named_as_the_flag(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text("max-bytes = 5\n")
    with pytest.raises(ConfigError, match=re.escape("--max-bytes must be 0 or more")):
        build_config({"max_bytes": -1}, path)


def test_a_config_path_that_is_a_directory_is_said_in_pzqs_words(tmp_path):
    result = run_pzq(["--config", str(tmp_path)])
    assert result.returncode == EXIT_USAGE
    assert result.stderr.strip().splitlines() == [
        f"pzq: error: config file {tmp_path} is a directory: give the file's path"]


def test_every_option_kind_says_what_a_config_file_gives_it():
    assert {option.kind for option in OPTIONS} <= set(TOML_WANTED)


@pytest.mark.parametrize("values, message", [
    ({"ack_timeout": 0}, "--ack-timeout must be greater than 0"),
    ({"inflight_size": -1}, "--inflight-size must be greater than 0"),
    ({"receive_dsn": "localhost:11131"}, "not a ZeroMQ endpoint"),
    ({"log_level": "loud"}, "--log-level must be one of"),
    ({"replicas": 1}, "--replicas 1 needs at least that many --nodes"),
    ({"nodes": ("tcp://a:1",)}, "--nodes needs --broadcast-dsn"),
    ({"nodes": ("tcp://a:1", "tcp://c:1", "tcp://a:1"), "broadcast_dsn": "tcp://b:1"},
     "same endpoint twice: tcp://a:1$"),  # named: which of many is not plain
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "tcp://a:1"}, "not this node's --broadcast-dsn "
                                                              "tcp://a:1$"),
    ({"replicas": -1}, "--replicas must be 0 or more"),
    # the peers know a node by its --broadcast-dsn: a wildcard is no node they list
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "tcp://0.0.0.0:2"}, "not a wildcard"),
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "tcp://[::]:2"}, "not a wildcard"),
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "tcp://b:*"}, "not a wildcard"),
    ({"nodes": ("tcp://a:1",), "broadcast_dsn": "ipc://*"}, "not a wildcard"),
])
def test_invalid_values(values, message):
    with pytest.raises(ConfigError, match=message):
        build_config(values)


@pytest.mark.parametrize("args, message", [
    (["--ack-timeout", "-5"], "--ack-timeout must be greater than 0"),
    (["--ack-timeout", "-1s"], "--ack-timeout must be greater than 0"),  # not a lost value
    (["--ack-timeout=-1s"], "--ack-timeout must be greater than 0"),
    (["--consume-heartbeat", "-250ms"], "--consume-heartbeat must be greater than 0"),
    (["--ack-timeout", "soon"], ("argument --ack-timeout: soon is not a duration: give "
                                 "microseconds (5000000) or a number with a unit: 250ms, 5s")),
    (["--timeout-nodes", "2.5"], ("2.5 has no unit, so it would be microseconds, which are "
                                  "whole: did you mean 2.5s?")),
    (["--reaper-frequency", "5 parsecs"], "5 parsecs is not a duration"),
    (["--ack-timeout", "9" * 400], "9" * 40 + "... is not a duration"),  # not float's inf
    # a time is at most a century, as a DELAY or TTL: a reaper's period of millions of
    # years ended the node at its start in APScheduler's OverflowError
    (["--reaper-frequency", "999999999999d"], "--reaper-frequency must be at most 36600d "
                                              "(a century)"),
    (["--relay-poll", "99999999999999999"], "--relay-poll must be at most 3162240000000 ms "
                                            "(a century)"),
    (["--retain-hours", "878401"], "--retain-hours must be at most 878400 hours (a century)"),
    (["--consume-heartbeat", "25h"], "--consume-heartbeat must be at most 1d"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--log-format", "xml"], "--log-format must be one of"),
    (["--config", "/nonexistent/pzq.toml"], "does not exist"),
    (["--replicas", "2", "--nodes", "tcp://127.0.0.1:1", "--broadcast-dsn", "tcp://127.0.0.1:2"],
     "--replicas 2 needs at least that many --nodes"),
    (["--nodes", "tcp://127.0.0.1:1", "--broadcast-dsn", "tcp://*:2"],
     "--broadcast-dsn tcp://*:2: the other nodes know this node by its --broadcast-dsn"),
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


def test_a_host_a_bind_cannot_take_says_what_it_takes(tmp_path):
    """libzmq says only "No such device" for a name that is no interface of this host."""
    result = run_pzq(["--database", str(tmp_path / "db"), "--receive-dsn",
                      "tcp://no-such-interface0:11131", "--send-dsn", "tcp://127.0.0.1:*",
                      "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == EXIT_BIND
    assert result.stderr.strip().splitlines()[-1] == (
        "pzq: error: cannot bind --receive-dsn tcp://no-such-interface0:11131: No such "
        "device (bind to an address or interface of this host, or * for every one)")


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


@pytest.mark.parametrize("text, microseconds", [
    ("5000000", 5_000_000), ("5s", 5_000_000), ("250ms", 250_000), ("2m", 120_000_000),
    ("1h", 3_600_000_000), ("1.5s", 1_500_000), ("500us", 500), ("3 min", 180_000_000)])
def test_durations_on_the_command_line_and_in_the_config_file(tmp_path, text, microseconds):
    flags = ("--ack-timeout", "--reaper-frequency", "--timeout-nodes", "--timeout_replication")
    config = parse_config([argument for flag in flags for argument in (flag, text)])
    assert (config.ack_timeout_us, config.reaper_period_us, config.timeout_nodes_us,
            config.timeout_replication_us) == (microseconds,) * 4
    path = tmp_path / "pzq.toml"
    path.write_text("".join(f'{name} = "{text}"\n' for name in (
        "ack-timeout", "reaper-frequency", "timeout-nodes", "timeout_replication")))
    assert build_config({}, path).timeout_replication_us == microseconds


def test_a_node_takes_its_ack_timeout_with_a_unit(start_node, context):
    node = start_node("--ack-timeout", "750ms", "--reaper-frequency", "100ms")
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"]).ok
    with Consumer(node.send_dsn, context=context) as consumer:
        assert consumer.receive(10).ack_timeout_us == 750_000


@pytest.mark.parametrize("where, message", [
    ("file", "--database {path} is a file, not a directory"),
    ("file/db", "cannot create database directory {path}: {file} is a file"),
])
def test_a_database_path_through_a_file_says_so(tmp_path, where, message):
    (tmp_path / "file").write_text("not a database")
    path = tmp_path / where
    result = run_pzq(["--database", str(path), "--receive-dsn", "tcp://127.0.0.1:*",
                      "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == EXIT_STORE
    assert result.stderr.strip() == "pzq: error: " + message.format(path=path,
                                                                     file=tmp_path / "file")


def test_the_original_pzqs_store_file_as_database_says_what_it_is(tmp_path):
    """The original's --database was a Kyoto Cabinet file (sink.kch): it said only
    'is a file, not a directory'. The file's first bytes are the original's own."""
    path = tmp_path / "sink.kch"
    path.write_bytes(b"KC\n\x00\x10\x0e\x06\xbc" + bytes(56))
    result = run_pzq(["--database", str(path), "--receive-dsn", "tcp://127.0.0.1:*",
                      "--send-dsn", "tcp://127.0.0.1:*", "--monitor-dsn", "tcp://127.0.0.1:*"])
    assert result.returncode == EXIT_STORE
    assert result.stderr.strip() == (
        f"pzq: error: --database {path} is a Kyoto Cabinet file, the original pzq's store, "
        "which pzq cannot read: give a directory for pzq's own store, and let the original "
        "node's consumers take its messages before it stops")
    assert path.read_bytes().startswith(b"KC\n")  # left as it was


@pytest.mark.parametrize("option, says", [
    (["--background"], "--background is the original pzq's: pzq stays in the foreground; "
     "start it under a supervisor (systemd, docker) to run it in the background"),
    (["--user", "nobody"], "--user is the original pzq's: pzq runs as the user that starts "
     "it; start it as that user (systemd's User=, or runuser -u USER -- pzq ...)"),
    (["--user=nobody"], "--user is the original pzq's"),
])
def test_the_original_pzqs_own_options_are_refused_saying_why(tmp_path, option, says):
    """The original's code (not its README) took --background and --user: argparse said
    only 'unrecognized arguments'."""
    result = run_pzq(["--database", str(tmp_path / "db"), *option])
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("pzq: error: " + says), line
    assert not (tmp_path / "db").exists()


def test_a_node_whose_ticks_are_a_month_apart_runs(start_inproc_node, context):
    """libzmq's poll takes its wait in ms as a C int (24.8 days at most): the reaper's
    tick and the timed fsync a month away overflowed it, the node's loop ended with an
    OverflowError after node_ready; the poll now waits an hour at most at a time."""
    node = start_inproc_node("--reaper-frequency", "30d", "--sync-interval", "30d",
                             "--consume-heartbeat", "1d", tcp=True)
    with Producer(node.receive_dsn, context=context) as producer, \
            Consumer(node.send_dsn, context=context) as consumer:
        assert producer.produce([b"kept"]).ok
        message = consumer.receive(10)
        assert message is not None and message.parts == (b"kept",)
        message.ack()
    node.wait_figures(lambda figures: figures["messages"] == 0, message="the ACK")
