"""--authorization: what each CURVE client key may produce, consume and administer, on
real daemons; the file read again on SIGHUP; its mistakes refused at start."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
import zmq
from rich.console import Console

from pzq import curve_probe, security
from pzq.archive.reader import ArchiveReader
from pzq.cli import monitor
from pzq.client import Consumer, ConsumeRefused, GroupConsumer, Producer, request_monitor
from pzq.client.monitor import StatsAnswer
from pzq.errors import ReaderError
from pzq.monitoring.metrics import PzqCollector
from pzq.security import ClientCurve
from tests.integration.test_tools import BIN
from tests.support.harness import run_pzq, wait_until

# what a refused message's ACK says after its topic
NOT_YOURS = b": this client key may not produce to that topic (see the node's " \
    b"--authorization file)"

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def clients(curve_keys, tmp_path):
    """The node's keys (``args``) and three admitted clients: ``client`` (listed with
    narrow rights), ``ops`` (listed, admin) and ``guest`` (not listed: [default])."""
    node_public = curve_keys["client"].server_public
    made = {"client": curve_keys["client"]}
    for name in ("ops", "guest"):
        public, secret = security.generate(tmp_path / "keys", name)
        (tmp_path / "authorized" / f"{name}.key").write_bytes(public.read_bytes())
        made[name] = ClientCurve(security.load_key_pair(secret), node_public)
    return {"args": curve_keys["args"], "curve": made,
            "key": {name: curve.keys.public.decode() for name, curve in made.items()}}


def rules(clients, client_produce=("orders", "audit.*"), client_consume=("orders:billing",)
          ) -> str:
    produce = ", ".join(json.dumps(topic) for topic in client_produce)
    consume = ", ".join(json.dumps(pattern) for pattern in client_consume)
    return f"""
[default]
produce = ["public"]
consume = ["public:*"]
admin = false

[clients."{clients['key']['client']}"]
produce = [{produce}]
consume = [{consume}]
admin = false

[clients."{clients['key']['ops']}"]
produce = []
consume = ["*:default"]
admin = true
"""


@pytest.fixture
def rules_file(tmp_path, clients):
    path = tmp_path / "authorization.toml"
    path.write_text(rules(clients))
    return path


@pytest.fixture
def guarded(start_node, clients, rules_file):
    node = start_node(*clients["args"], "--authorization", str(rules_file), consume=True)
    node.curve = clients["curve"]["ops"]
    return node


def produce(node, curve, topic, context, body=b"m"):
    with Producer(node.receive_dsn, context=context, curve=curve) as producer:
        return producer.produce([body], topic=topic, timeout=10)


def ask(node, curve, command):
    return request_monitor(node.monitor_dsn, command, timeout=10, curve=curve).decode()


def test_each_key_does_what_its_rights_say(guarded, clients, context):
    curve = clients["curve"]
    assert produce(guarded, curve["client"], "orders", context).ok
    assert produce(guarded, curve["client"], "audit.eu", context).ok
    refused = produce(guarded, curve["client"], "secret", context)
    assert not refused.ok and refused.status_message == b"FORBIDDEN produce secret" + NOT_YOURS
    # a message without TOPIC: is the default topic's
    assert produce(guarded, curve["client"], None, context).status_message \
        == b"FORBIDDEN produce default" + NOT_YOURS
    assert produce(guarded, curve["guest"], "public", context).ok
    assert produce(guarded, curve["guest"], "orders", context).status_message \
        == b"FORBIDDEN produce orders" + NOT_YOURS
    assert produce(guarded, curve["ops"], "orders", context).status_message \
        == b"FORBIDDEN produce orders" + NOT_YOURS
    # nothing refused was stored, nor its topic made
    topics = ask(guarded, curve["client"], "TOPICS")
    assert "secret" not in topics and "audit.eu" in topics
    assert guarded.stats()["messages"] == 3

    with GroupConsumer(guarded.consume_dsn, "orders", "billing", context=context,
                       curve=curve["client"]) as billing:
        assert billing.receive(10).parts == (b"m",)
    with pytest.raises(ConsumeRefused, match="FORBIDDEN consume orders:shipping"):
        with GroupConsumer(guarded.consume_dsn, "orders", "shipping", context=context,
                           curve=curve["client"]) as shipping:
            shipping.receive(5)
    with GroupConsumer(guarded.consume_dsn, "public", "any", context=context,
                       curve=curve["guest"]) as public:
        assert public.receive(10).parts == (b"m",)
    assert "shipping" not in ask(guarded, curve["client"], "TOPICS")

    # --send-dsn: group default of every topic, for keys with *:default only
    with Consumer(guarded.send_dsn, context=context, curve=curve["client"]) as refused_pool:
        assert refused_pool.receive(1.0) is None
    wait_until(lambda: any(event.get("event") == "handshake_refused" and event["reason"]
                           == "FORBIDDEN consume *:default (--send-dsn)"
                           and event["client_key"] == clients["key"]["client"]
                           for event in list(guarded.events)), 10, message="the refusal logged")
    with Consumer(guarded.send_dsn, context=context, curve=curve["ops"]) as pool:
        assert pool.receive(10) is not None

    # the monitor: reading is open, changing needs admin
    assert ask(guarded, curve["client"], "PING") == "PONG"
    assert ask(guarded, curve["client"], "DECLARE TOPIC made") == (
        "ERROR: FORBIDDEN DECLARE: this client key may not administer the node "
        "(admin = false in the --authorization file)")
    assert ask(guarded, curve["guest"], "PURGE ALL").startswith("ERROR: FORBIDDEN PURGE")
    assert "made" not in ask(guarded, curve["client"], "TOPICS")
    assert not ask(guarded, curve["ops"], "DECLARE TOPIC made").startswith("ERROR")

    stats = guarded.stats()
    assert stats["forbidden"]["produce"] == 4 and stats["forbidden"]["admin"] == 2
    assert stats["forbidden"]["consume"] >= 2  # the CONSUME, and each refused handshake
    assert stats["authorization"]["clients"] == 2
    metrics = {sample.labels["kind"]: sample.value
               for family in PzqCollector(_OneAnswer(guarded.monitor_dsn, stats)).collect()
               if family.name == "pzq_forbidden" for sample in family.samples}
    assert metrics["produce"] == 4 and metrics["admin"] == 2
    # pzq-monitor's table showed none of them
    shown = Console(width=200, record=True)
    shown.print(monitor.table([StatsAnswer(guarded.monitor_dsn, stats)]))
    (row,) = [line for line in shown.export_text().splitlines()
              if "refused by --authorization" in line]
    assert f"produce 4, consume {stats['forbidden']['consume']}, admin 2" in row


def test_a_topics_archive_is_read_with_a_right_over_all_its_groups(start_node, clients,
                                                                   rules_file, tmp_path,
                                                                   context):
    node = start_node(*clients["args"], "--authorization", str(rules_file), "--archive-dir",
                      str(tmp_path / "archive"), "--archive-dsn", "tcp://127.0.0.1:*",
                      "--flush-interval", "50")
    curve = clients["curve"]
    node.curve = curve["ops"]
    for number in range(3):
        assert produce(node, curve["guest"], "public", context, b"p%d" % number).ok
    with Consumer(node.send_dsn, context=context, curve=curve["ops"]) as pool:
        for _ in range(3):
            pool.receive(10).ack()
    node.wait_stats(lambda s: s["archive"]["archived"] == 3, message="archived")
    node.wait_archive_durable()
    dsn = node.event("node_ready")["archive"]

    def bodies(who: str) -> list[bytes]:
        with ArchiveReader(dsn, "public", context=context, curve=curve[who]) as reader:
            return sorted(message.parts[0] for _, message in reader.messages())

    assert bodies("guest") == [b"p0", b"p1", b"p2"]  # public:* in [default]
    assert bodies("ops") == [b"p0", b"p1", b"p2"]  # admin
    with pytest.raises(ReaderError, match="status 103: forbidden") as refused:
        bodies("client")  # orders:billing only
    assert refused.value.status == 103
    assert node.stats()["forbidden"]["consume"] == 1
    # listing the replays only reads (it was refused as FORBIDDEN REPLAYS); making one
    # changes a group
    assert ask(node, curve["client"], "REPLAYS") == "no replays\n"
    assert ask(node, curve["client"], "REPLAY GROUP public any from=earliest").startswith(
        "ERROR: FORBIDDEN REPLAY: this client key may not administer the node")


class _OneAnswer:
    """A scraper with one node's STATS already asked (the exporter's collector)."""

    def __init__(self, dsn: str, stats: dict) -> None:
        self.answer = StatsAnswer(dsn, stats)

    def scrape(self, timeout=None):
        return [self.answer]

    def node_id(self, dsn: str) -> str:
        return "n"


def test_sighup_reads_the_rules_again_and_keeps_them_when_the_file_is_bad(
        guarded, clients, rules_file, context):
    curve = clients["curve"]
    assert not produce(guarded, curve["client"], "later", context).ok
    assert produce(guarded, curve["client"], "orders", context).ok
    billing = GroupConsumer(guarded.consume_dsn, "orders", "billing", context=context,
                            curve=curve["client"])
    billing.receive(10).ack()
    rules_file.write_text(rules(clients, ("orders", "later"), ()))
    guarded.process.send_signal(signal.SIGHUP)
    wait_until(lambda: guarded.event("authorization_reloaded"), 10, message="reloaded")
    assert produce(guarded, curve["client"], "later", context).ok
    assert not produce(guarded, curve["client"], "audit.eu", context).ok
    # a consumer let in under the old rules is told, and let go: ConsumeRefused (it
    # waited on, its receive None, the node's words only in its errors)
    assert produce(guarded, curve["client"], "orders", context).ok
    with pytest.raises(ConsumeRefused, match="^FORBIDDEN consume orders:billing: the node's "
                                             "--authorization rules changed$"):
        billing.receive(10)
    billing.close()
    stats = guarded.stats()
    assert stats["topics"]["orders"]["groups"]["billing"]["consumers"] == 0

    rules_file.write_text(rules(clients).replace("admin = true", "admin = \"yes\""))
    guarded.process.send_signal(signal.SIGHUP)
    refused = wait_until(lambda: guarded.event("authorization_reload_refused"), 10,
                         message="reload refused")
    assert "admin" in refused["error"] and str(rules_file) in refused["error"]
    assert produce(guarded, curve["client"], "later", context).ok  # the old rules stay
    assert guarded.stats()["authorization"]["reloads_refused"] == 1

    guarded.stop()  # a restart reads the file as it is: a bad one stops the start
    with pytest.raises(RuntimeError, match="admin must be true or false"):
        guarded.start()
    rules_file.write_text(rules(clients))
    guarded.start()
    assert not produce(guarded, curve["client"], "later", context).ok
    assert produce(guarded, curve["client"], "audit.eu", context).ok
    assert guarded.stats()["forbidden"]["produce"] == 1  # counted since this start


def test_pzq_consume_whose_group_a_reload_forbids_stops_saying_so(guarded, clients, context,
                                                                  rules_file, curve_keys):
    """It went on waiting, silent, its process alive, once the node had let it go."""
    files = curve_keys["files"]
    assert produce(guarded, clients["curve"]["client"], "orders", context).ok
    with subprocess.Popen([str(BIN / "pzq-consume"), "--curve-client-key", files["client"],
                           "--curve-server-key", files["node"], "--dsn", guarded.consume_dsn,
                           "--topic", "orders", "--group", "billing"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as consumer:
        wait_until(lambda: guarded.stats()["topics"].get("orders", {}).get("groups", {})
                   .get("billing", {}).get("consumers") == 1, 15, message="pzq-consume joined")
        rules_file.write_text(rules(clients, ("orders",), ("orders:shipping",)))
        guarded.process.send_signal(signal.SIGHUP)
        try:
            _, stderr = consumer.communicate(timeout=15)
        finally:
            consumer.kill()
    assert consumer.returncode == 1, stderr
    assert stderr.splitlines()[-1] == ("pzq-consume: error: FORBIDDEN consume orders:billing: "
                                       "the node's --authorization rules changed")


def test_pzq_consume_kept_off_the_send_dsn_by_the_rules_is_told_they_may(guarded, curve_keys):
    """Its key is in --curve-authorized-keys: it was sent to look for it there alone."""
    files = curve_keys["files"]
    result = subprocess.run([str(BIN / "pzq-consume"), "--curve-client-key", files["client"],
                             "--curve-server-key", files["node"], "--dsn", guarded.send_dsn,
                             "--timeout", "1"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(
        "the node refused this client's CURVE key: is its public key in the node's "
        "--curve-authorized-keys? With --authorization, do its rules give it *:default "
        "(--send-dsn takes no other key)?")


def test_the_curve_probe_of_a_send_dsn_the_rules_keep_a_key_off_names_the_rules(guarded,
                                                                                 clients):
    """Its key is in --curve-authorized-keys: the probe's words named that file alone."""
    said = curve_probe.why_silent(guarded.send_dsn, clients["curve"]["client"])
    assert said == curve_probe.CLIENT_KEY_REFUSED
    assert "--curve-authorized-keys" in said and "--authorization rules" in said


def test_an_empty_file_starts_the_node_with_a_warning_and_grants_nothing(
        start_node, clients, rules_file, context):
    """It started silent, every key refused everything."""
    rules_file.write_text("")
    node = start_node(*clients["args"], "--authorization", str(rules_file))
    warned = wait_until(lambda: node.event("authorization_grants_nothing"), 10,
                        message="the warning at start")
    assert warned["level"] == "warning" and warned["path"] == str(rules_file)
    assert produce(node, clients["curve"]["client"], "orders", context).status_message \
        == b"FORBIDDEN produce orders" + NOT_YOURS
    rules_file.write_text(rules(clients))
    node.process.send_signal(signal.SIGHUP)
    wait_until(lambda: node.event("authorization_reloaded"), 10, message="reloaded")
    assert produce(node, clients["curve"]["client"], "orders", context).ok
    rules_file.write_text("[default]\n")  # read again: warned again
    node.process.send_signal(signal.SIGHUP)
    wait_until(lambda: len([event for event in list(node.events)
                            if event.get("event") == "authorization_grants_nothing"]) == 2,
               10, message="the warning at the reload")


@pytest.mark.parametrize(("text", "said"), [
    ('[default]\nproduce = []\nread = []\n', "line 3: [default]: unknown key 'read'"),
    ('[default]\n[clients."abc"]\nadmin = true\n',
     'line 2: [clients."abc"]: not a CURVE public key'),
    ('[default]\nproduce = []\nproduce = []\n', "line 3: produce is given twice: give it once")])
def test_a_bad_file_stops_the_start_naming_what_is_wrong(tmp_path, text, said):
    """Each mistake's line: tests/unit/test_authorization_rules.py."""
    path = tmp_path / "rules.toml"
    path.write_text(text)
    result = run_pzq(["--authorization", str(path), "--database", str(tmp_path / "db")])
    assert result.returncode == 2
    assert result.stderr.startswith(f"pzq: error: --authorization {path}, {said}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_without_curve_every_client_has_the_default_rights(start_inproc_node, tmp_path,
                                                           context):
    path = tmp_path / "rules.toml"
    path.write_text('[default]\nproduce = ["open.*"]\nconsume = ["open.*:readers"]\n')
    node = start_inproc_node("--authorization", str(path))
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"], topic="open.a").ok
        assert producer.produce([b"x"], topic="closed").status_message \
            == b"FORBIDDEN produce closed" + NOT_YOURS
    with GroupConsumer(node.consume_dsn, "open.a", "readers", context=context) as readers:
        assert readers.receive(10).parts == (b"x",)
    with pytest.raises(ConsumeRefused, match="FORBIDDEN consume open.a:writers"):
        with GroupConsumer(node.consume_dsn, "open.a", "writers", context=context) as other:
            other.receive(5)
    assert node.ask("DECLARE TOPIC t").startswith("ERROR: FORBIDDEN DECLARE")
    assert json.loads(node.ask("STATS"))["forbidden"] == {"produce": 1, "consume": 1,
                                                          "admin": 1}


def test_client_tables_without_curve_are_taken_with_a_warning(start_node, tmp_path, context):
    """They were ignored unsaid: the key listed with admin was refused DECLARE."""
    path = tmp_path / "rules.toml"
    path.write_text('[default]\nproduce = ["open"]\n\n'
                    '[clients."rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"]\nadmin = true\n')
    node = start_node("--authorization", str(path))
    warned = wait_until(lambda: node.event("authorization_clients_ignored"), 10,
                        message="the warning")
    assert warned["level"] == "warning" and warned["clients"] == 1
    assert node.ask("DECLARE TOPIC t").startswith("ERROR: FORBIDDEN DECLARE")
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"], topic="open", timeout=10).ok


def test_a_listed_key_curve_does_not_admit_is_taken_with_a_warning(start_node, clients,
                                                                  rules_file, curve_keys):
    """Such a key never gets in (the client's secret key pasted for its public one,
    say): its table was ignored unsaid."""
    pasted = curve_keys["client"].keys.secret.decode()  # 40 characters of Z85 too
    rules_file.write_text(rules(clients).replace(clients["key"]["client"], pasted))
    node = start_node(*clients["args"], "--authorization", str(rules_file))
    warned = wait_until(lambda: node.event("authorization_clients_not_admitted"), 10,
                        message="the warning")
    assert warned["level"] == "warning" and warned["keys"] == [pasted]
    assert warned["count"] == 1
    rules_file.write_text(rules(clients))  # mended: no warning at the reload
    node.process.send_signal(signal.SIGHUP)
    wait_until(lambda: node.event("authorization_reloaded"), 10, message="reloaded")
    assert len([event for event in list(node.events)
                if event.get("event") == "authorization_clients_not_admitted"]) == 1


def test_without_the_option_everything_is_allowed_and_nothing_forbidden(start_inproc_node,
                                                                        context):
    node = start_inproc_node()
    with Producer(node.receive_dsn, context=context) as producer:
        assert producer.produce([b"x"], topic="any").ok
    assert not node.ask("DECLARE TOPIC t").startswith("ERROR")
    stats = json.loads(node.ask("STATS"))
    assert stats["forbidden"] == {"produce": 0, "consume": 0, "admin": 0}
    assert "authorization" not in stats


def test_the_config_file_gives_the_rules_too(tmp_path):
    rules_path = tmp_path / "rules.toml"
    rules_path.write_text('[default]\nproduce = ["a b"]\n')
    config = tmp_path / "pzq.toml"
    config.write_text(f'authorization = "{rules_path}"\ndatabase = "{tmp_path / "db"}"\n')
    result = run_pzq(["--config", str(config)])
    assert result.returncode == 2
    assert f"--authorization {rules_path}, line 2: [default] produce: bad pattern 'a b'" \
        in result.stderr


def test_the_clusters_own_traffic_is_not_subject_to_the_rules(start_node, clients, tmp_path,
                                                             context):
    """Rules that give every key but one nothing, the node's shared key among them: the
    nodes still join, copy, and remove everywhere what a consumer ACKed."""
    path = tmp_path / "rules.toml"
    path.write_text(f'[clients."{clients["key"]["client"]}"]\nproduce = ["orders"]\n'
                    'consume = ["orders:billing"]\n')
    endpoints = [f"ipc://{tmp_path}/n{number}.cluster" for number in (0, 1)]
    nodes = [start_node(*clients["args"], "--authorization", str(path), "--replicas", "1",
                        "--broadcast-dsn", endpoints[number], "--nodes", endpoints[1 - number],
                        consume=True) for number in (0, 1)]
    for node in nodes:
        node.curve = clients["curve"]["client"]
        node.wait_stats(lambda s: s["peers"][0]["state"] == "up", message="peer up")
    ack = produce(nodes[0], clients["curve"]["client"], "orders", context)
    assert ack.ok and not ack.replication_failed
    nodes[1].wait_stats(lambda s: s["replicas_held"] == 1, message="the copy held")
    with GroupConsumer(nodes[0].consume_dsn, "orders", "billing", context=context,
                       curve=clients["curve"]["client"]) as billing:
        billing.receive(10).ack()
    nodes[1].wait_stats(lambda s: s["replicas_held"] == 0, message="the copy removed")
    assert all(node.stats()["forbidden"] == {"produce": 0, "consume": 0, "admin": 0}
               for node in nodes)


def test_a_key_removed_from_the_directory_is_cut_off_and_back_once_put_back(
        guarded, clients, curve_keys, tmp_path, context):
    """ZAP sees handshakes only: a producer, group consumer or monitor connection made
    before its key was removed (SIGHUP) went on. The reload cuts them and their next
    handshake is refused: nothing more is stored, answered or delivered, what the
    consumer held is given back at once; a key put back gets in again (at a new
    connection: ZeroMQ does not try a connection whose handshake was refused again)."""
    curve = clients["curve"]["client"]
    authorized = tmp_path / "authorized"
    producer = Producer(guarded.receive_dsn, context=context, curve=curve)
    assert producer.produce([b"before"], topic="orders", timeout=10).ok
    assert producer.produce([b"held"], topic="orders", timeout=10).ok
    billing = GroupConsumer(guarded.consume_dsn, "orders", "billing", context=context,
                            curve=curve, window=1)
    monitor = context.socket(zmq.DEALER)  # one connection, as a dashboard keeps it
    curve.apply(monitor)
    monitor.connect(guarded.monitor_dsn)

    def ping(timeout_ms: int = 10_000) -> bytes | None:
        try:
            monitor.send_multipart([b"", b"PING"], zmq.NOBLOCK)
        except zmq.Again:
            return None  # no connection to ask on
        return monitor.recv_multipart()[-1] if monitor.poll(timeout_ms) else None

    try:
        assert ping() == b"PONG"
        billing.receive(10).ack()
        guarded.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["inflight"]
                           == 1, message="the second message held")
        (authorized / "client.key").unlink()
        guarded.process.send_signal(signal.SIGHUP)
        cut = wait_until(lambda: guarded.event("curve_connections_cut"), 10, message="cut")
        assert cut["by_endpoint"]["receive"] >= 1 and cut["by_endpoint"]["consume"] >= 1 \
            and cut["by_endpoint"]["monitor"] >= 1
        guarded.wait_stats(lambda s: s["topics"]["orders"]["groups"]["billing"]["inflight"]
                           == 0, message="what the consumer held given back")
        with pytest.raises(TimeoutError):
            producer.produce([b"after"], topic="orders", timeout=1.5)
        assert ping(500) is None
        (authorized / "client.key").write_bytes(
            (tmp_path / "keys" / "client.key").read_bytes())
        guarded.process.send_signal(signal.SIGHUP)
        wait_until(lambda: len([event for event in list(guarded.events)
                                if event.get("event") == "curve_keys_reloaded"]) == 2, 10,
                   message="reloaded again")
        assert produce(guarded, curve, "orders", context, b"back").ok
        assert ask(guarded, curve, "PING") == "PONG"
    finally:
        producer.close()
        billing.close()
        monitor.close(0)
    assert guarded.stats()["received"] == 3  # not the message sent while cut off


def test_each_refusal_is_logged_once_with_the_key(guarded, clients, context):
    """A FORBIDDEN produce, CONSUME or command was logged at debug level alone (the
    producer's reject) or not at all: an operator saw nothing of who tried what."""
    curve = clients["curve"]
    key = clients["key"]
    for _ in range(3):  # a client refused in a loop: logged once
        assert not produce(guarded, curve["client"], "secret", context).ok
    assert not produce(guarded, curve["guest"], "orders", context).ok
    with pytest.raises(ConsumeRefused):
        GroupConsumer(guarded.consume_dsn, "orders", "shipping", context=context,
                      curve=curve["client"]).receive(10)
    assert ask(guarded, curve["client"], "DECLARE TOPIC x").startswith("ERROR: FORBIDDEN")

    def logged() -> list[dict] | None:
        said = [event for event in list(guarded.events) if event.get("event") == "forbidden"]
        return said if len(said) >= 4 else None

    said = wait_until(logged, 10, message="four refusals logged")
    assert [(event["level"], event["kind"], event["what"], event["client_key"])
            for event in said] == [
        ("info", "produce", "secret", key["client"]),
        ("info", "produce", "orders", "[default]"),
        ("info", "consume", "orders:shipping", key["client"]),
        ("info", "admin", "DECLARE", key["client"])]
    assert guarded.stats()["forbidden"] == {"produce": 4, "consume": 1, "admin": 1}
