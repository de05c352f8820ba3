"""pzq --shards N: one supervisor runs N nodes on this host as one cluster, starts a
shard again when it dies, stops them all on SIGINT, and leaves none behind when it is
killed itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pzq import security
from pzq.client import Producer, RoutedGroupConsumer, RoutedProducer, request_monitor
from pzq.protocol.headers import partition_of
from pzq.security import ClientCurve
from tests.cluster.test_partitioned_topics import drain_routed
from tests.support.harness import consume_all, run_pzq, shown_on_failure, wait_until
from tests.support.ports import port_for_shards

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="shards end with their supervisor on Linux only")]

# what a refused message's ACK says after its topic
NOT_YOURS = b": this client key may not produce to that topic (see the node's " \
    b"--authorization file)"

SHARDS = 2
SERVICES = ("receive", "send", "monitor", "broadcast")
STOP_TIMEOUT = 60.0


@dataclass(frozen=True)
class ShardEndpoints:
    """What a client of shard K connects to: the given port + 10·K."""

    receive_dsn: str
    send_dsn: str
    monitor_dsn: str

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(request_monitor(self.monitor_dsn, "STATS",
                                                            timeout=10.0))
        return answer


class Supervisor:
    """``pzq --shards N`` as a child of the test; its log and its shards' (one stderr)
    is read as it comes."""

    def __init__(self, database: Path, *options: str, shards: int = SHARDS,
                 ports: dict[str, int] | None = None) -> None:
        self.database = database  # named in a failing test's report (tests/conftest.py)
        self.shards = shards
        self.ports = ports or {service: port_for_shards(shards) for service in SERVICES}
        self.options = options
        self.stderr_lines: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        endpoints = [argument for service, port in self.ports.items()
                     for argument in (f"--{service}-dsn", f"tcp://127.0.0.1:{port}")]
        return [sys.executable, "-P", "-m", "pzq", "--shards", str(self.shards),
                "--database", str(self.database), *endpoints, "--log-format", "json",
                *self.options]

    def start(self) -> Supervisor:
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self._reader.start()
        return self

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            self.stderr_lines.append(raw.decode(errors="replace").rstrip("\n"))

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in list(self.stderr_lines):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
        return found

    def pids(self, shard: int) -> list[int]:
        """The pid of each start of ``shard``, the first first."""
        return [event["pid"] for event in self.events("shard_started") if event["shard"] == shard]

    def shard(self, number: int) -> ShardEndpoints:
        def dsn(service: str) -> str:
            return f"tcp://127.0.0.1:{self.ports[service] + 10 * number}"
        return ShardEndpoints(dsn("receive"), dsn("send"), dsn("monitor"))

    def signal_and_wait(self, signum: int) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(STOP_TIMEOUT)
        if self._reader is not None:
            self._reader.join(5)
        return code


@pytest.fixture
def start_shards(request: pytest.FixtureRequest,
                 tmp_path: Path) -> Iterator[Callable[..., Supervisor]]:
    """Start ``pzq --shards 2``; one still running at teardown is stopped, and so are
    its shards."""
    started: list[Supervisor] = []
    shown_on_failure(request).append(started)

    def start(*options: str, database: Path | None = None, **layout: Any) -> Supervisor:
        supervisor = Supervisor(database or tmp_path / f"shards{len(started)}", *options,
                                **layout)
        started.append(supervisor)
        return supervisor.start()

    yield start
    for supervisor in started:
        if supervisor.process is not None and supervisor.process.poll() is None:
            supervisor.signal_and_wait(signal.SIGTERM)


def exited(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (a container's init may be slow to)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def wait_every_shard_up(supervisor: Supervisor) -> None:
    for number in range(supervisor.shards):
        shard = supervisor.shard(number)
        wait_until(lambda shard=shard: _peers_up(shard, supervisor.shards), 30, interval=0.1,
                   message=f"shard {number} answering and seeing the other shards up")


def _peers_up(shard: ShardEndpoints, shards: int) -> bool:
    try:
        peers = shard.stats()["peers"]
    except Exception:  # not bound yet: the monitor does not answer
        return False
    return len(peers) == shards - 1 and all(peer["state"] == "up" for peer in peers)


def produce(shard: ShardEndpoints, context: Any, first: int, count: int) -> set[bytes]:
    """``count`` messages numbered from ``first``, each ACKed with its copy on a peer."""
    with Producer(shard.receive_dsn, context=context) as producer:
        for number in range(first, first + count):
            producer.send([b"%06d" % number])
        acks = producer.flush(30)
    assert len(acks) == count
    assert all(ack.ok and not ack.replication_failed for ack in acks), acks
    return {b"%06d" % number for number in range(first, first + count)}


@dataclass(frozen=True)
class EveryShard:
    """consume_all's node: one consumer connected to every shard."""

    send_dsn: list[str]


def test_shards_replicate_restart_a_killed_shard_and_stop_on_sigint(start_shards, context):
    supervisor = start_shards("--replicas", "1", "--timeout-nodes", "2s",
                              "--timeout_replication", "10s", "--ack-timeout", "2s",
                              "--reaper-frequency", "200ms")
    wait_every_shard_up(supervisor)
    shards = [supervisor.shard(number) for number in range(SHARDS)]
    everywhere = EveryShard([shard.send_dsn for shard in shards])

    first = produce(shards[0], context, 0, 50) | produce(shards[1], context, 100, 50)
    consume_all(everywhere, context, first)

    acked = produce(shards[0], context, 200, 50) | produce(shards[1], context, 300, 50)
    (killed,) = supervisor.pids(1)
    os.kill(killed, signal.SIGKILL)
    exit_event = wait_until(lambda: supervisor.events("shard_exited"), 20,
                            message="the supervisor seeing shard 1 exit")[0]
    assert (exit_event["shard"], exit_event["code"], exit_event["restarting_in_ms"]) == (
        1, -signal.SIGKILL, 500)
    wait_until(lambda: len(supervisor.pids(1)) == 2, 20, message="shard 1 started again")
    assert supervisor.pids(1)[1] != killed and len(supervisor.pids(0)) == 1
    consume_all(everywhere, context, acked)  # every message ACKed before the kill

    children = supervisor.pids(0) + supervisor.pids(1)
    assert supervisor.signal_and_wait(signal.SIGINT) == 0
    assert all(exited(pid) for pid in children)
    stopped = {event["shard"]: event["code"] for event in supervisor.events("shard_stopped")}
    assert stopped == {0: 0, 1: 0}
    assert supervisor.events("shards_stopping")[0]["signal"] == "SIGINT"


def test_shards_stop_when_their_supervisor_is_killed(start_shards):
    supervisor = start_shards()
    wait_until(lambda: len(supervisor.events("node_ready")) == SHARDS, 30,
               message="both shards ready")
    children = supervisor.pids(0) + supervisor.pids(1)
    assert supervisor.signal_and_wait(signal.SIGKILL) == -signal.SIGKILL
    wait_until(lambda: all(exited(pid) for pid in children), 30,
               message="the shards of a killed supervisor exiting")


def test_a_shard_that_cannot_start_stops_the_supervisor_with_its_code_and_line(
        start_shards):
    """Stores made with orders=16, started with orders=8: each shard refuses (exit 2).
    Started again it would refuse again, for ever: the supervisor stops instead."""
    made = start_shards("--partitions", "orders=16")
    wait_until(lambda: len(made.events("node_ready")) == SHARDS, 30, message="shards ready")
    assert made.signal_and_wait(signal.SIGTERM) == 0
    refused = start_shards("--partitions", "orders=8", database=made.database)
    assert refused.process is not None
    code = refused.process.wait(30)
    assert refused._reader is not None
    refused._reader.join(5)
    assert code == 2
    conflict = "orders has 16 partitions; a partition count is fixed"
    last = refused.stderr_lines[-1]
    assert last.startswith("pzq: error: shard ") and "cannot start (exit 2; not started " \
        "again, the other shards are stopped)" in last and conflict in last
    assert not refused.events("shard_exited")  # none started again
    assert len(refused.events("shard_started")) <= SHARDS
    (first, *_) = refused.events("shard_cannot_start")
    assert first["code"] == 2 and conflict in first["error"]


@pytest.mark.timeout(30)
def test_shards_that_would_bind_one_port_are_refused_before_any_starts(tmp_path):
    port = port_for_shards(SHARDS)
    finished = run_pzq(["--shards", "2", "--database", str(tmp_path / "db"),
                        "--receive-dsn", f"tcp://127.0.0.1:{port}",
                        "--send-dsn", f"tcp://127.0.0.1:{port + 10}"])
    assert finished.returncode == 2
    assert finished.stderr == (
        f"pzq: error: --shards 2: shard 1's --receive-dsn tcp://127.0.0.1:{port + 10} would "
        f"bind where shard 0's --send-dsn tcp://127.0.0.1:{port + 10} does; shard K adds "
        "10*K to every tcp port\n")
    assert not (tmp_path / "db").exists()


@pytest.mark.timeout(30)
def test_shards_whose_shared_key_is_not_authorized_are_refused_before_any_starts(
        tmp_path, curve_keys):
    """They would start and never join: each refusing the others' handshakes."""
    secret = curve_keys["files"]["stranger"]
    authorized = curve_keys["args"][3]  # the node's and the client's keys, not this one
    finished = run_pzq(["--shards", "2", "--database", str(tmp_path / "db"),
                        "--curve-secret-key", secret, "--curve-authorized-keys", authorized])
    assert finished.returncode == 2
    assert finished.stderr == (
        f"pzq: error: the public key of --curve-secret-key {secret} is not in "
        f"--curve-authorized-keys {authorized}, and the shards connect to each other with "
        f"that key pair: they would never join; copy {secret[:-len('_secret')]} there\n")
    assert not (tmp_path / "db").exists()


@pytest.mark.timeout(30)
def test_a_database_holding_one_nodes_store_is_refused(tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "CURRENT").write_text("MANIFEST-000001\n")
    finished = run_pzq(["--shards", "2", "--database", str(tmp_path / "db")])
    assert finished.returncode == 3
    assert finished.stderr == (
        f"pzq: error: --database {tmp_path / 'db'} holds one node's store; --shards keeps "
        f"each shard's store in {tmp_path / 'db'}/shard-K: give the shards a directory of "
        "their own, e.g. --database db-shards\n")
    assert sorted(path.name for path in (tmp_path / "db").iterdir()) == ["CURRENT"]


def test_shards_split_a_partitioned_topic_and_routing_clients_use_both(start_shards, context):
    supervisor = start_shards("--consume-dsn", f"tcp://127.0.0.1:{port_for_shards(SHARDS)}")
    wait_every_shard_up(supervisor)
    monitors = [supervisor.shard(number).monitor_dsn for number in range(SHARDS)]
    request_monitor(monitors[0], "DECLARE TOPIC orders partitions=32", 10)

    def routed_everywhere() -> bool:
        tables = [json.loads(request_monitor(monitor, "ROUTES", 10)) for monitor in monitors]
        return all("orders" in table["topics"] and all(
            "consume" in node for node in table["nodes"].values()) for table in tables)
    wait_until(routed_everywhere, 30, interval=0.1, message="both shards routing orders")
    with RoutedProducer(monitors[:1], "orders", context=context) as producer:
        for index in range(200):
            producer.send([b"m%d" % index], key=b"k%d" % (index % 40))
        assert all(ack.ok for ack in producer.flush())
        assert producer.moved == 0
    stored = [supervisor.shard(number).stats()["stored"] for number in range(SHARDS)]
    assert sum(stored) == 200 and all(stored), stored  # each shard took its partitions
    with RoutedGroupConsumer(monitors[1:], "orders", "billing", context=context) as consumer:
        drain_routed(consumer, 200, timeout=30)


def test_every_shard_applies_the_authorization_file_and_sighup_reaches_them(
        start_shards, tmp_path, context):
    """Without CURVE every client has [default]'s rights, on every shard alike."""
    rules = tmp_path / "rules.toml"
    rules.write_text('[default]\nproduce = ["open"]\n')
    supervisor = start_shards("--authorization", str(rules))
    wait_until(lambda: len(supervisor.events("node_ready")) == SHARDS, 30,
               message="both shards ready")
    shards = [supervisor.shard(number) for number in range(SHARDS)]

    def answers(topic: str) -> list[bytes]:
        found = []
        for shard in shards:
            with Producer(shard.receive_dsn, context=context) as producer:
                found.append(producer.produce([b"m"], topic=topic, timeout=10).status_message)
        return found

    assert answers("closed") == [b"FORBIDDEN produce closed" + NOT_YOURS] * SHARDS
    rules.write_text('[default]\nproduce = ["open", "closed"]\n')
    assert supervisor.process is not None
    supervisor.process.send_signal(signal.SIGHUP)
    wait_until(lambda: len(supervisor.events("authorization_reloaded")) == SHARDS, 30,
               message="every shard reading its rules again")
    # each line says which shard logged it (two lines alike said nothing of it)
    assert sorted(event["shard"] for event in supervisor.events("authorization_reloaded")
                  ) == list(range(SHARDS))
    assert sorted(event["shard"] for event in supervisor.events("node_ready")) == list(
        range(SHARDS))
    assert answers("closed") == [b""] * SHARDS
    assert supervisor.signal_and_wait(signal.SIGTERM) == 0

    rules.write_text('[default]\nproduce = ["open/"]\n')  # refused before any shard starts
    refused = run_pzq(["--shards", "2", "--database", str(tmp_path / "db"),
                       "--authorization", str(rules)], timeout=30)
    assert refused.returncode == 2 and "bad pattern 'open/'" in refused.stderr
    assert "shard_started" not in refused.stderr


def test_a_routed_producer_sends_again_what_a_killed_shard_lost(start_shards, context):
    """A shard killed with messages on their way to it is started again within a
    second or so: the route table never counts it down, so the routed producer must see
    by itself that those messages are lost (docs/cluster.rst, "Routing clients"), and a
    send waiting for room in that shard's full window must not wait its timeout out."""
    supervisor = start_shards("--consume-dsn", f"tcp://127.0.0.1:{port_for_shards(SHARDS)}")
    wait_every_shard_up(supervisor)
    monitors = [supervisor.shard(number).monitor_dsn for number in range(SHARDS)]
    request_monitor(monitors[0], "DECLARE TOPIC orders partitions=8", 10)

    def shard_1_owns_a_partition() -> list[int]:
        table = json.loads(request_monitor(monitors[0], "ROUTES", 10))
        owners = table["topics"].get("orders", {}).get("owners", [])
        shard_1 = f"tcp://127.0.0.1:{supervisor.ports['broadcast'] + 10}"
        return [number for number, owner in enumerate(owners) if owner == shard_1]
    partition = wait_until(shard_1_owns_a_partition, 30, interval=0.1,
                           message="shard 1 owning a partition of orders")[0]
    key = next(b"k%d" % n for n in range(1000) if partition_of(b"k%d" % n, 8) == partition)
    (victim,) = supervisor.pids(1)
    with RoutedProducer(monitors, "orders", window=10, resend_after=0.4,
                        context=context) as producer:
        producer.send([b"first"], key=key, dedup_id="first")
        assert [ack.ok for ack in producer.flush(10)] == [True]  # its producer connected
        os.kill(victim, signal.SIGSTOP)  # what is sent now stays in its socket's buffer
        killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))
        killer.start()
        try:
            for index in range(30):  # the window fills: a send waits for room
                producer.send([b"m%d" % index], key=key, dedup_id=f"m{index}", timeout=20)
            acks = producer.flush(30)
        finally:
            killer.join()
        assert len(acks) == 30 and all(ack.ok for ack in acks), acks
        assert producer.resent >= 10  # the window the killed shard never read
    assert len(supervisor.pids(1)) == 2
    with RoutedGroupConsumer(monitors, "orders", "billing", context=context) as consumer:
        drain_routed(consumer, 31, timeout=30)


def test_a_removed_key_is_cut_off_on_every_shard(start_shards, tmp_path, curve_keys, context):
    """The supervisor passes SIGHUP to every shard, and each cuts the removed key's
    connections (its clients and its links to the other shards alike, which connect
    again with their shared key): the removed key's producers are answered no more, a
    kept key is served by every shard, and the shards see each other up again."""
    authorized = Path(curve_keys["args"][3])
    public, secret = security.generate(tmp_path / "keys", "kept")
    (authorized / "kept.key").write_bytes(public.read_bytes())
    kept = ClientCurve(security.load_key_pair(secret), curve_keys["client"].server_public)
    supervisor = start_shards(*curve_keys["args"])
    wait_until(lambda: len(supervisor.events("node_ready")) == SHARDS, 30,
               message="both shards ready")
    shards = [supervisor.shard(number) for number in range(SHARDS)]
    removed = [Producer(shard.receive_dsn, context=context, curve=curve_keys["client"])
               for shard in shards]
    try:
        assert all(producer.produce([b"before"], timeout=10).ok for producer in removed)
        wait_until(lambda: len(supervisor.events("peer_up")) >= SHARDS, 30,
                   message="each shard has heard the other")
        (authorized / "client.key").unlink()
        assert supervisor.process is not None
        supervisor.process.send_signal(signal.SIGHUP)
        cuts = wait_until(lambda: (found := supervisor.events("curve_connections_cut"))
                          and len(found) == SHARDS and found, 30, message="each shard's cut")
        # the removed key's producer on each; the links between the shards on at least
        # one (a shard heard the other on its own link, whose answers come back on it,
        # while the other's connection to it may not have been accepted yet)
        assert [cut["by_endpoint"]["receive"] for cut in cuts] == [1] * SHARDS
        assert sum(cut["by_endpoint"]["cluster"] for cut in cuts) >= 1
        for producer in removed:
            with pytest.raises(TimeoutError):
                producer.produce([b"after"], timeout=1.5)
    finally:
        for producer in removed:
            producer.close()

    def peers_up(shard: ShardEndpoints) -> bool:
        stats = json.loads(request_monitor(shard.monitor_dsn, "STATS", 10, curve=kept))
        return all(peer["state"] == "up" for peer in stats["peers"])
    for shard in shards:
        with Producer(shard.receive_dsn, context=context, curve=kept) as producer:
            assert producer.produce([b"kept"], timeout=10).ok
        wait_until(lambda shard=shard: peers_up(shard), 30, interval=0.2,
                   message="the other shard up again")
