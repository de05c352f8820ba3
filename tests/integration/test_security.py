"""CURVE: only clients with an authorized key produce, consume, ACK, monitor or join."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
import zmq
from zmq.utils.monitor import recv_monitor_message

from pzq import curve_probe, handshakes, security
from pzq.client import Consumer, Producer, request_monitor
from pzq.errors import ConfigError
from pzq.security import PLAIN, ClientCurve
from pzq.zap import RefusalLog
from tests.support.harness import run_pzq, wait_until, without_permission_overrides

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def keys(curve_keys):
    return curve_keys


@pytest.fixture
def secure_node(start_node, keys):
    node = start_node(*keys["args"], "--ack-timeout", "1000000", "--reaper-frequency", "100000")
    node.curve = keys["client"]
    return node


def test_authorized_client_does_everything(secure_node, keys, context):
    with Producer(secure_node.receive_dsn, context=context, curve=keys["client"]) as producer:
        assert producer.produce([b"secret"]).ok
    with Consumer(secure_node.send_dsn, context=context, curve=keys["client"]) as consumer:
        message = consumer.receive(10)
        assert message.parts == (b"secret",)
        message.ack()
    secure_node.wait_figures(lambda f: f["messages"] == 0 and f["acked"] == 1, message="acked")


@pytest.mark.parametrize("who", ["stranger", "plain"])
def test_others_cannot_produce_consume_or_monitor(secure_node, keys, context, who):
    curve = keys["stranger"] if who == "stranger" else PLAIN
    with Producer(secure_node.receive_dsn, context=context, curve=curve) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"intruder"], timeout=1.5)
    with Producer(secure_node.receive_dsn, context=context, curve=keys["client"]) as producer:
        assert producer.produce([b"for members"]).ok
    with Consumer(secure_node.send_dsn, context=context, curve=curve) as consumer:
        assert consumer.receive(1.5) is None
    with pytest.raises(TimeoutError):
        request_monitor(secure_node.monitor_dsn, "PING", timeout=1.5, curve=curve)
    figures = secure_node.figures()
    assert figures["received"] == 1 and figures["delivered"] == 0


def test_others_cannot_ack(secure_node, keys, context, open_socket):
    with Producer(secure_node.receive_dsn, context=context, curve=keys["client"]) as producer:
        producer.produce([b"kept"])
    with Consumer(secure_node.send_dsn, context=context, curve=keys["client"]) as consumer:
        message = consumer.receive(10)
        intruder = open_socket(zmq.ROUTER)
        keys["stranger"].apply(intruder)
        intruder.connect(secure_node.send_dsn)
        intruder.send_multipart([message.peer, message.key, b"1"])
        # The intruder's ACK never lands: the message times out and comes back.
        again = consumer.receive(10)
        assert again.key == message.key
        again.ack()
    secure_node.wait_figures(lambda f: f["acked"] == 1 and f["messages"] == 0,
                             message="the member's ack")


def test_a_node_without_an_authorized_key_cannot_join(start_node, keys, tmp_path):
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(3)]
    common = ["--timeout-nodes", "500000", "--replicas", "1"]
    members = [start_node(*keys["args"], *common, "--broadcast-dsn", endpoints[i],
                          "--nodes", endpoints[1 - i]) for i in (0, 1)]
    for node in members:
        node.curve = keys["client"]
        node.wait_stats(lambda s: s["peers"][0]["state"] == "up", message="member peer up")
    intruder = start_node(*keys["stranger_args"], *common, "--broadcast-dsn", endpoints[2],
                          "--nodes", endpoints[0])
    # The intruder serves its own key pair; our client key is authorized there too.
    intruder.curve = ClientCurve(keys["client"].keys, keys["stranger"].keys.public)
    seen = wait_until(lambda: (lambda s: s if s["uptime_seconds"] > 2.0 else None)(
        intruder.stats()), 10, message="time for the intruder to try")
    # Four timeouts later its pings have never been answered, and no member has
    # seen a single frame of it.
    assert seen["peers"][0]["last_heard_seconds"] is None
    assert seen["peers"][0]["state"] == "down"
    for node in members:
        assert node.stats()["cluster_rejected"] == 0


def test_curve_options_go_together_and_keys_must_exist(tmp_path, keys):
    lone = run_pzq(["--curve-secret-key", keys["args"][1]])
    assert lone.returncode == 2 and "go together" in lone.stderr
    missing = run_pzq(["--curve-secret-key", str(tmp_path / "none.key_secret"),
                       "--curve-authorized-keys", str(tmp_path)])
    assert missing.returncode == 2
    assert (f"cannot read CURVE key file {tmp_path / 'none.key_secret'}: there is no such file"
            in missing.stderr)


@pytest.mark.parametrize("content, why", [
    ("garbage\n", "no public-key line"),
    ('curve\n    public-key = "abc"\n', "its public-key is not 40 characters of Z85"),
])
@pytest.mark.parametrize("option", ["--curve-authorized-keys", "--cluster-authorized-keys"])
def test_a_key_directory_with_a_file_that_is_no_key_stops_the_node(node_keys, tmp_path,
                                                                   content, why, option):
    """pyzmq's authenticator drops a whole directory for one bad file and refuses every
    client as unknown: the node must not start so."""
    made = node_keys["made"]
    directory = node_keys["clients"] if option == "--curve-authorized-keys" \
        else node_keys["cluster_dirs"][0]
    (directory / "broken.key").write_text(content)
    result = run_pzq(["--curve-secret-key", str(made["n0"][1]),
                      "--curve-authorized-keys", str(node_keys["clients"]),
                      "--cluster-authorized-keys", str(node_keys["cluster_dirs"][0]),
                      "--broadcast-dsn", "tcp://127.0.0.1:1", "--nodes",
                      "n1=tcp://127.0.0.1:2", "--database", str(tmp_path / "db")])
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"pzq: error: {option} {directory}: broken.key is not a "
                                     f"CURVE public key file ({why}; pzq-keygen writes them)")


def _edited(source: Path, target: Path, line: str, value: str) -> Path:
    """``source`` with its ``line = "..."`` given ``value`` instead."""
    lines = [f'    {line} = "{value}"' if text.strip().startswith(f"{line} =") else text
             for text in source.read_text().splitlines()]
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.mark.parametrize("line, value, why", [
    ("public-key", "short", "its public-key is not 40 characters of Z85 (pzq-keygen writes "
                            "them)"),
    ("secret-key", "short", "its secret-key is not 40 characters of Z85 (pzq-keygen writes "
                            "them)"),
    ("secret-key", "0123456789" * 4, "its public-key is not the one of its secret-key (the "
                                     "two lines come from different pairs; pzq-keygen "
                                     "writes them)"),
])
def test_a_secret_key_file_with_a_bad_key_is_one_line_at_start(tmp_path, line, value, why):
    """A key of the wrong length was libzmq's EINVAL as a traceback; halves of two pairs
    started a node that every client took for the wrong server key."""
    public, secret = security.generate(tmp_path, "n0")
    edited = _edited(secret, tmp_path / "edited.key_secret", line, value)
    with pytest.raises(ConfigError) as refused:
        security.load_key_pair(edited)
    assert str(refused.value) == f"cannot read CURVE key file {edited}: {why}"
    (tmp_path / "clients").mkdir()
    shutil.copy(public, tmp_path / "clients")
    node = run_pzq(["--curve-secret-key", str(edited), "--curve-authorized-keys",
                    str(tmp_path / "clients"), "--database", str(tmp_path / "db")])
    assert node.returncode == 2
    assert node.stderr == f"pzq: error: {refused.value}\n"


def test_a_server_key_or_a_file_that_is_no_key_is_one_line(tmp_path):
    public, _ = security.generate(tmp_path, "n0")
    short = _edited(public, tmp_path / "short.key", "public-key", "short")
    with pytest.raises(ConfigError) as refused:
        security.load_public_key(short)
    assert str(refused.value) == (f"cannot read CURVE key file {short}: its public-key is not "
                                  "40 characters of Z85 (pzq-keygen writes them)")
    _, secret = security.generate(tmp_path, "n1")  # it worked, the node's secret key
    with pytest.raises(ConfigError) as refused:   # copied to the client's host
        security.load_public_key(secret)
    assert str(refused.value) == (f"{secret} holds a secret key: give the public .key file "
                                  "(a client needs only the node's public key; its secret "
                                  "key stays on the node)")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("garbage\n")
    with pytest.raises(ConfigError) as refused:
        security.load_public_key(garbage)
    assert str(refused.value) == (f"cannot read CURVE key file {garbage}: it is not a CURVE "
                                  "key file (no public-key line; pzq-keygen writes them)")


def test_a_key_its_user_may_not_read_is_one_line_naming_the_user(tmp_path):
    """A secret key copied to a host as root (0600, or in a folder of root's alone) and
    the node run as its own user, as the deploying page runs it: the line says who may
    not read it, not an errno's repr twice over."""
    _, secret = security.generate(tmp_path, "n0")
    as_root = os.geteuid() == 0
    if as_root:  # root reads anything: read it as nobody (the test's folder is root's)
        os.seteuid(pwd.getpwnam("nobody").pw_uid)
    else:
        secret.chmod(0)
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
        with pytest.raises(ConfigError) as refused:
            security.load_key_pair(secret)
    finally:
        if as_root:
            os.seteuid(0)
    assert str(refused.value) == (
        f"cannot read CURVE key file {secret}: the user {user} may not read it (permission "
        "denied): give it to the user that runs this (chown)")


def test_a_refused_handshake_is_logged_at_info_once_per_client(secure_node, keys, context):
    with Producer(secure_node.receive_dsn, context=context, curve=keys["stranger"]) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"intruder"], timeout=2)
    wait_until(lambda: secure_node.event("handshake_refused"), 10, message="a refusal logged")
    refusals = [event for event in secure_node.events if event["event"] == "handshake_refused"]
    stranger_key = keys["stranger"].keys.public.decode()
    assert len(refusals) == 1
    assert refusals[0]["level"] == "info" and refusals[0]["client_key"] == stranger_key
    assert refusals[0]["mechanism"] == "CURVE" and refusals[0]["address"] == "127.0.0.1"
    assert refusals[0]["reason"] == "Unknown key: not in --curve-authorized-keys"


def test_refusals_of_one_client_are_rate_limited():
    now = [100.0]
    refusals = RefusalLog(now=lambda: now[0])
    with structlog.testing.capture_logs() as logged:
        for _ in range(50):
            refusals.refused("10.0.0.1", "CURVE", "KEY", "Unknown key")
            now[0] += 0.1
        refusals.refused("10.0.0.2", "CURVE", "OTHER", "Unknown key")
        now[0] += 10
        refusals.refused("10.0.0.1", "CURVE", "KEY", "Unknown key")
    assert [(event["address"], event["refused_since_last_logged"]) for event in logged] == [
        ("10.0.0.1", 0), ("10.0.0.2", 0), ("10.0.0.1", 49)]


def tool(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / name), *args], input=stdin,
                          capture_output=True, text=True, timeout=30, check=False)


def test_a_tool_served_leaves_no_refused_handshake_in_the_log(secure_node, keys, tmp_path,
                                                               context):
    """Checking its --dsn, each tool connected to the node's port and hung up at once:
    'the client closed the connection during the handshake' at every run."""
    files = tmp_path / "keys"
    result = tool("pzq-ctl", "--dsn", secure_node.monitor_dsn, "--curve-client-key",
                  str(files / "client.key_secret"), "--curve-server-key",
                  str(files / "node.key"), "pending")
    assert result.returncode == 0, result.stderr
    # a refusal to wait for: the tool's, had there been one, came before it
    with Producer(secure_node.receive_dsn, context=context, curve=keys["stranger"]) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"intruder"], timeout=1)
    wait_until(lambda: secure_node.event("handshake_refused"), 10, message="a refusal logged")
    refused = [event for event in list(secure_node.events)
               if event.get("event") == "handshake_refused"]
    assert [event["client_key"] for event in refused] == [
        keys["stranger"].keys.public.decode()]


def test_a_refused_client_key_is_named_with_the_nodes_option(secure_node, tmp_path):
    keys = tmp_path / "keys"
    result = tool("pzq-produce", "--dsn", secure_node.receive_dsn,
                  "--curve-client-key", str(keys / "stranger.key_secret"),
                  "--curve-server-key", str(keys / "node.key"), "--timeout", "2", stdin="x\n")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(
        "the node refused this client's public key (--curve-client-key): it is not among "
        "the keys in the node's --curve-authorized-keys (or, on --send-dsn, the node's "
        "--authorization rules give it no *:default)")


def test_a_message_a_refused_key_sent_is_said_never_to_have_reached_the_node(secure_node,
                                                                             tmp_path):
    """It said 'the node may have stored it or not' of a message whose connection never
    got past its handshake, which ZeroMQ sends nothing before."""
    keys = tmp_path / "keys"
    result = tool("pzq-produce", "--dsn", secure_node.receive_dsn,
                  "--curve-client-key", str(keys / "stranger.key_secret"),
                  "--curve-server-key", str(keys / "node.key"), "--ack-timeout", "1",
                  stdin="x\n")
    assert result.returncode == 1 and result.stdout.endswith(" failed NO_ACK\n")
    assert result.stderr.splitlines()[-1] == (
        "pzq-produce: 1 message without ACK within 1 s (NO_ACK): never reached the node (no "
        "handshake with it was taken: a node down, or one that refuses this client's keys), "
        "so nothing was stored; send it again")
    assert secure_node.stats()["received"] == 0


def test_a_wrong_server_key_is_named_as_the_clients_option(secure_node, start_node, tmp_path):
    keys = tmp_path / "keys"
    wrong = tool("pzq-ctl", "--dsn", secure_node.monitor_dsn, "--timeout", "1.5",
                 "--curve-client-key", str(keys / "client.key_secret"),
                 "--curve-server-key", str(keys / "stranger.key"), "pending")
    assert wrong.returncode == 1
    error = wrong.stderr.splitlines()[-1]
    assert error.endswith("the node could not read this client's CURVE handshake: the "
                          "server key given (--curve-server-key) does not match the node's "
                          "public key")
    assert "--curve-authorized-keys" not in wrong.stderr
    plain = start_node()  # no CURVE at all
    unsealed = tool("pzq-ctl", "--dsn", plain.monitor_dsn, "--timeout", "1.5",
                    "--curve-client-key", str(keys / "client.key_secret"),
                    "--curve-server-key", str(keys / "node.key"), "pending")
    assert unsealed.returncode == 1
    assert "the node does not serve CURVE" in unsealed.stderr.splitlines()[-1]


def test_a_missing_key_file_is_named(secure_node, tmp_path):
    keys = tmp_path / "keys"
    missing = tmp_path / "nowhere.key_secret"
    result = tool("pzq-ctl", "--dsn", secure_node.monitor_dsn, "--curve-client-key",
                  str(missing), "--curve-server-key", str(keys / "node.key"), "pending")
    assert result.returncode == 2
    assert result.stderr == (f"pzq-ctl: error: cannot read CURVE key file {missing}: there "
                             "is no such file\n")


def test_a_consumer_the_node_does_not_take_says_why(secure_node, tmp_path):
    keys = tmp_path / "keys"
    said = {
        (): "the node requires CURVE: give --curve-client-key and --curve-server-key",
        ("stranger.key_secret", "node.key"): "the node refused this client's CURVE key: is its "
                                             "public key in the node's --curve-authorized-keys? "
                                             "With --authorization, do its rules give it "
                                             "*:default (--send-dsn takes no other key)?",
        ("client.key_secret", "stranger.key"): "the CURVE handshake fails: is "
                                               "--curve-server-key the node's public key (its "
                                               ".key file)?"}
    runs = {files: subprocess.Popen(
        [str(Path(sys.executable).parent / "pzq-consume"), "--dsn", secure_node.send_dsn,
         "--timeout", "1", *(["--curve-client-key", str(keys / files[0]),
                              "--curve-server-key", str(keys / files[1])] if files else [])],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for files in said}  # side by side: each waits its second
    for files, process in runs.items():
        with process:
            _, stderr = process.communicate(timeout=30)
        assert process.returncode == 1
        assert stderr.splitlines()[-1] == (f"pzq-consume: error: nothing delivered within 1 s "
                                           f"from {secure_node.send_dsn}: {said[files]}")


@pytest.fixture
def node_keys(tmp_path):
    """Two nodes with a key pair each, one client; each node's cluster directory holds
    the other node's public key, the client directory only the client's."""
    made = {name: security.generate(tmp_path / "keys", name) for name in ("n0", "n1", "client")}
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / "client.key").write_bytes(made["client"][0].read_bytes())
    cluster_dirs = []
    for index in (0, 1):
        directory = tmp_path / f"cluster{index}"
        directory.mkdir()
        other = f"n{1 - index}"
        (directory / f"{other}.key").write_bytes(made[other][0].read_bytes())
        cluster_dirs.append(directory)
    pairs = {name: security.load_key_pair(secret) for name, (_, secret) in made.items()}
    return {"made": made, "pairs": pairs, "clients": clients, "cluster_dirs": cluster_dirs}


def _keyed_member(start_node, node_keys, index, endpoints, *extra):
    made = node_keys["made"]
    node = start_node("--curve-secret-key", str(made[f"n{index}"][1]),
                      "--curve-authorized-keys", str(node_keys["clients"]),
                      "--cluster-authorized-keys", str(node_keys["cluster_dirs"][index]),
                      "--broadcast-dsn", endpoints[index],
                      "--nodes", f"n{1 - index}={endpoints[1 - index]}",
                      "--timeout-nodes", "500000", *extra)
    node.curve = ClientCurve(node_keys["pairs"]["client"], node_keys["pairs"][f"n{index}"].public)
    return node


def test_nodes_with_their_own_keys_replicate(start_node, node_keys, tmp_path, context):
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    members = [_keyed_member(start_node, node_keys, i, endpoints, "--replicas", "1")
               for i in (0, 1)]
    for node in members:
        node.wait_stats(lambda s: s["peers"][0]["state"] == "up", message="peer up")
    with Producer(members[0].receive_dsn, context=context, curve=members[0].curve) as producer:
        answer = producer.produce([b"copied"])
    assert answer.ok and not answer.replication_failed
    members[1].wait_stats(lambda s: s["replicas_held"] == 1, message="the copy on n1")


def test_a_leaked_client_key_cannot_join_a_cluster_of_keyed_nodes(start_node, node_keys,
                                                                  tmp_path):
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(3)]
    member = _keyed_member(start_node, node_keys, 0, endpoints)
    # The intruder holds the client's key pair (authorized on the member's client
    # endpoints) and knows the member's public key.
    intruder_dir = tmp_path / "intruder-cluster"
    intruder_dir.mkdir()
    (intruder_dir / "n0.key").write_bytes(node_keys["made"]["n0"][0].read_bytes())
    intruder = start_node("--curve-secret-key", str(node_keys["made"]["client"][1]),
                          "--curve-authorized-keys", str(node_keys["clients"]),
                          "--cluster-authorized-keys", str(intruder_dir),
                          "--broadcast-dsn", endpoints[2], "--nodes", f"n0={endpoints[0]}",
                          "--timeout-nodes", "500000")
    intruder.curve = ClientCurve(node_keys["pairs"]["client"],
                                 node_keys["pairs"]["client"].public)
    refused = wait_until(lambda: member.event("handshake_refused"), 10,
                         message="the member refusing the intruder's handshake")
    assert refused["client_key"] == node_keys["pairs"]["client"].public.decode()
    # pyzmq's 'Unknown key' alone: on the cluster endpoint, though the key is a client's
    assert refused["reason"] == ("Unknown key: not in --cluster-authorized-keys (not a node "
                                 "of this cluster)")
    seen = intruder.stats()
    assert seen["peers"][0]["last_heard_seconds"] is None
    assert member.stats()["cluster_rejected"] == 0


# the start's grace, after which a peer never reached is said: ticks enough to see
# the handshakes end before it (a heartbeat is a quarter of it)
GRACE = "2s"


def _refusals_said_once(node, reason: str) -> None:
    """The peer's handshake is refused ten times a second: said once, and named by the
    warning that the peer was never reached."""
    never = wait_until(lambda: node.event("peer_never_reached"), 15,
                       message="peer_never_reached in the log")
    assert never["reason"] == reason
    node.wait_stats(lambda s: s["uptime_seconds"] >= 3, message="some seconds of retries")
    said = [event for event in list(node.events) if event.get("event") == "peer_handshake_refused"]
    assert [(event["reason"], event["level"]) for event in said] == [(reason, "warning")]


def test_a_peer_that_refuses_this_nodes_key_is_said_with_why(start_node, node_keys,
                                                              tmp_path):
    """n1 admits n0's public key; this node holds another pair (the client's) and was
    only ever peer_never_reached, its peer's ZAP refusing it at every retry."""
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    _keyed_member(start_node, node_keys, 1, endpoints)
    stranger = start_node("--curve-secret-key", str(node_keys["made"]["client"][1]),
                          "--curve-authorized-keys", str(node_keys["clients"]),
                          "--cluster-authorized-keys", str(node_keys["cluster_dirs"][0]),
                          "--broadcast-dsn", endpoints[0], "--nodes", f"n1={endpoints[1]}",
                          "--timeout-nodes", GRACE)
    stranger.curve = ClientCurve(node_keys["pairs"]["client"],
                                 node_keys["pairs"]["client"].public)
    _refusals_said_once(stranger, "the peer refused this node's public key (ZAP status 400): "
                                  "it is not among the keys in the peer's "
                                  "--cluster-authorized-keys")


def test_a_peer_whose_key_is_not_the_one_named_is_said_with_why(start_node, node_keys,
                                                                 tmp_path):
    """n0's cluster directory holds another key as n1.key: the handshake it seals for
    that key, n1 cannot read, and hangs up."""
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    _keyed_member(start_node, node_keys, 1, endpoints)
    (node_keys["cluster_dirs"][0] / "n1.key").write_bytes(
        node_keys["made"]["client"][0].read_bytes())
    member = _keyed_member(start_node, node_keys, 0, endpoints, "--timeout-nodes", GRACE)
    _refusals_said_once(member, "the peer hung up on this node's CURVE handshake: its public "
                                "key is not its NAME.key in --cluster-authorized-keys "
                                "(--nodes NAME=ENDPOINT), or it serves no CURVE")


def test_a_node_without_curve_whose_peer_requires_it_is_said_with_why(start_node, node_keys,
                                                                      tmp_path):
    """Its peer refuses the mechanism, or hangs up first (a race at each retry): either
    way the reason names the option this node lacks, said once or, a hang-up seen first,
    twice (the refusal, when one comes, stands)."""
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    _keyed_member(start_node, node_keys, 1, endpoints)
    plain = start_node("--broadcast-dsn", endpoints[0], "--nodes", endpoints[1],
                       "--timeout-nodes", GRACE)
    never = wait_until(lambda: plain.event("peer_never_reached"), 15,
                       message="peer_never_reached in the log")
    plain.wait_stats(lambda s: s["uptime_seconds"] >= 3, message="some seconds of retries")
    said = [event["reason"] for event in list(plain.events)
            if event.get("event") == "peer_handshake_refused"]
    assert never["reason"] in said and 1 <= len(said) <= 2, said
    assert said[-1] in (
        "the peer requires CURVE: this node has no --curve-secret-key",
        "the peer hung up on this node's handshake (it requires CURVE? this node has no "
        "--curve-secret-key)")
    assert said[0] != said[-1] or len(said) == 1


@pytest.mark.parametrize("case", ["same-directory", "unnamed", "names-without-directory",
                                  "missing-key", "own-key-not-authorized"])
def test_cluster_key_options_are_checked(node_keys, tmp_path, case):
    made = node_keys["made"]
    base = ["--curve-secret-key", str(made["n0"][1]),
            "--curve-authorized-keys", str(node_keys["clients"]),
            "--broadcast-dsn", "tcp://127.0.0.1:1"]
    cluster = ["--cluster-authorized-keys", str(node_keys["cluster_dirs"][0])]
    args, expected = {
        "same-directory": (["--cluster-authorized-keys", str(node_keys["clients"]),
                            "--nodes", "n1=tcp://127.0.0.1:2"], "must not be --curve-authorized"),
        "unnamed": ([*cluster, "--nodes", "tcp://127.0.0.1:2"], "not named: tcp://127.0.0.1:2"),
        "names-without-directory": (["--nodes", "n1=tcp://127.0.0.1:2"],
                                    "give that directory"),
        # named as the entry that needs it (it was the file alone, also on SIGHUP)
        "missing-key": ([*cluster, "--nodes", "n9=tcp://127.0.0.1:2"], (
            f"--nodes n9=tcp://127.0.0.1:2 names the peer's key n9.key, which "
            f"--cluster-authorized-keys {node_keys['cluster_dirs'][0]} does not hold: a node "
            f"in --nodes keeps its key there (take it out of --nodes, with a restart, to "
            f"withdraw it)")),
        # Without a cluster directory the nodes share n0's key pair: each must admit it.
        "own-key-not-authorized": (["--nodes", "tcp://127.0.0.1:2"], (
            f"the public key of --curve-secret-key {made['n0'][1]} is not in "
            f"--curve-authorized-keys {node_keys['clients']}, and the cluster's nodes "
            f"connect to each other with that key pair: they would never join; copy "
            f"{made['n0'][0]} there")),
    }[case]
    result = run_pzq([*base, *args, "--database", str(tmp_path / "db")])
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr


def test_a_client_without_curve_keys_is_logged_as_refused_too(secure_node, context):
    with Producer(secure_node.receive_dsn, context=context) as producer:  # no CURVE at all
        with pytest.raises(TimeoutError):
            producer.produce([b"plain"], timeout=2)
    refused = wait_until(lambda: secure_node.event("handshake_refused"), 10,
                         message="a refusal logged")
    assert refused["level"] == "info" and refused["endpoint"] == secure_node.receive_dsn
    # Which side of the handshake sees the mismatch first is a race: either reason names
    # a client without CURVE keys.
    assert refused["reason"] in (handshakes.NO_CURVE, handshakes.LEFT)
    # Its retries, about ten a second, are counted, not logged one by one.
    assert len([e for e in secure_node.events if e["event"] == "handshake_refused"]) == 1


def _events(node, name: str) -> list[dict]:
    return [event for event in list(node.events) if event.get("event") == name]


def _reload_keys(node, reloads: int, event: str = "curve_keys_reloaded") -> dict:
    node.process.send_signal(signal.SIGHUP)
    return wait_until(lambda: (_events(node, event) or [None])[-1]
                      if len(_events(node, event)) == reloads else None, 10,
                      message=f"{event} #{reloads}")


def test_sighup_reads_the_key_directories_again(secure_node, keys, tmp_path, context):
    """A key is added or revoked as a broker's user is, without a restart: the node read
    --curve-authorized-keys at start only."""
    authorized = tmp_path / "authorized"
    with Producer(secure_node.receive_dsn, context=context, curve=keys["stranger"]) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"before"], timeout=1.5)
    (authorized / "stranger.key").write_bytes((tmp_path / "keys" / "stranger.key").read_bytes())
    added = _reload_keys(secure_node, 1)
    assert added["added"] == [keys["stranger"].keys.public.decode()] and added["removed"] == []
    with Producer(secure_node.receive_dsn, context=context, curve=keys["stranger"]) as producer:
        assert producer.produce([b"added"], timeout=10).ok

    # a connection made before the key is removed: ZAP saw only its handshake, the
    # reload cuts it and its next handshake is refused
    with Producer(secure_node.receive_dsn, context=context, curve=keys["client"]) as cut:
        assert cut.produce([b"connected"], timeout=10).ok
        (authorized / "client.key").unlink()
        removed = _reload_keys(secure_node, 2)
        assert removed["removed"] == [keys["client"].keys.public.decode()]
        with pytest.raises(TimeoutError):
            cut.produce([b"cut off"], timeout=1.5)
    with Producer(secure_node.receive_dsn, context=context, curve=keys["client"]) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"revoked"], timeout=1.5)

    (authorized / "broken.key").write_text("garbage\n")  # refused: the keys in force stay
    refused = _reload_keys(secure_node, 1, "curve_keys_reload_refused")
    assert refused["error"] == (f"--curve-authorized-keys {authorized}: broken.key is not a "
                                f"CURVE public key file (no public-key line; pzq-keygen "
                                f"writes them)")
    with Producer(secure_node.receive_dsn, context=context, curve=keys["stranger"]) as producer:
        assert producer.produce([b"kept"], timeout=10).ok
    secure_node.curve = keys["stranger"]  # the monitor's client: the client's key is gone
    assert secure_node.figures()["received"] == 3


def test_a_nodes_key_pair_is_rotated_with_a_sighup_to_its_peers(start_node, node_keys,
                                                                tmp_path, context):
    """n0 takes a new pair: its peer is given the new n0.key and a SIGHUP, and its link
    to n0 expects the new key at its next connect. The peer read the key it expects
    of each --nodes entry at its start only: its copies to n0 failed until restarted."""
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    members = [_keyed_member(start_node, node_keys, i, endpoints, "--replicas", "1")
               for i in (0, 1)]
    n0, n1 = members
    n1.wait_stats(lambda s: s["peers"][0]["state"] == "up", message="n0 up at n1")
    n0.stop()
    public, secret = security.generate(tmp_path / "new-keys", "n0")
    (node_keys["cluster_dirs"][1] / "n0.key").write_bytes(public.read_bytes())
    n1.process.send_signal(signal.SIGHUP)
    reloaded = wait_until(lambda: n1.event("curve_keys_reloaded"), 10, message="reloaded")
    assert reloaded["peers_rekeyed"] == [endpoints[0]]
    n0.extra_args[n0.extra_args.index("--curve-secret-key") + 1] = str(secret)
    n0.start()
    n0.curve = ClientCurve(node_keys["pairs"]["client"], security.load_public_key(public))

    def copied_from_n1() -> bool:
        with Producer(n1.receive_dsn, context=context, curve=n1.curve) as producer:
            answer = producer.produce([b"copied to n0"], timeout=10)
        return answer.ok and not answer.replication_failed

    wait_until(copied_from_n1, 30, message="n1's copy taken by n0 under its new key")
    with Producer(n0.receive_dsn, context=context, curve=n0.curve) as producer:
        answer = producer.produce([b"copied to n1"], timeout=10)
    assert answer.ok and not answer.replication_failed


@pytest.mark.parametrize("locked", ["directory", "file"])
def test_a_key_directory_this_user_may_not_read_stops_the_node(keys, tmp_path, locked):
    """A directory that cannot be listed has no file a glob finds: the node started
    admitting nobody, unsaid."""
    prefix = without_permission_overrides()
    authorized = tmp_path / "authorized"
    target = authorized if locked == "directory" else authorized / "client.key"
    target.chmod(0o000)
    try:
        result = subprocess.run([*prefix, sys.executable, "-m", "pzq", *keys["args"],
                                 "--database", str(tmp_path / "db"),
                                 "--receive-dsn", "tcp://127.0.0.1:*",
                                 "--send-dsn", "tcp://127.0.0.1:*",
                                 "--monitor-dsn", "tcp://127.0.0.1:*"],
                                capture_output=True, text=True, timeout=30, check=False,
                                stdin=subprocess.DEVNULL)
    finally:
        target.chmod(0o755)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == {
        "directory": f"pzq: error: cannot read --curve-authorized-keys {authorized}: "
                     "Permission denied",
        "file": f"pzq: error: --curve-authorized-keys {authorized}: cannot read client.key: "
                "Permission denied"}[locked]


def test_a_key_directory_without_keys_is_taken_with_a_warning(start_node, keys, tmp_path,
                                                              context):
    empty = tmp_path / "nobody"
    empty.mkdir()
    (empty / "client.key_secret").write_bytes(b"")  # not a NAME.key: not read
    node = start_node("--curve-secret-key", keys["args"][1], "--curve-authorized-keys",
                      str(empty))
    warned = wait_until(lambda: node.event("curve_admits_nobody"), 10, message="warning")
    assert warned["level"] == "warning" and warned["directory"] == str(empty)
    (empty / "client.key").write_bytes((tmp_path / "keys" / "client.key").read_bytes())
    _reload_keys(node, 1)
    with Producer(node.receive_dsn, context=context, curve=keys["client"]) as producer:
        assert producer.produce([b"admitted"], timeout=10).ok
    assert len(_events(node, "curve_admits_nobody")) == 1


def test_a_secret_key_every_user_may_read_is_warned_of_at_start(start_node, keys, context):
    """A node's secret key copied with a mode of 0644 started without a word; its group
    may read it (the deploying page gives it to the node's group), the others may not."""
    secret = Path(keys["args"][1])
    secret.chmod(0o640)
    node = start_node(*keys["args"])
    with Producer(node.receive_dsn, context=context, curve=keys["client"]) as producer:
        assert producer.produce([b"kept"], timeout=10).ok
    assert _events(node, "curve_secret_key_readable_by_others") == []
    node.stop()
    secret.chmod(0o644)
    node = start_node(*keys["args"])
    warned = wait_until(lambda: node.event("curve_secret_key_readable_by_others"), 10,
                        message="the warning")
    assert warned["level"] == "warning" and warned["path"] == str(secret)
    assert warned["mode"] == "0644"
    with Producer(node.receive_dsn, context=context, curve=keys["client"]) as producer:
        assert producer.produce([b"runs on"], timeout=10).ok


def test_a_reload_keeps_the_shared_key_pair_of_a_cluster_admitted(start_node, keys, tmp_path):
    """Nodes sharing one key pair connect to each other with it: a directory without
    it is refused at start, and was taken at a reload (the peers then never joined)."""
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    node = start_node(*keys["args"], "--broadcast-dsn", endpoints[0], "--nodes",
                      endpoints[1], "--timeout-nodes", "500000")
    node.curve = keys["client"]
    (tmp_path / "authorized" / "node.key").unlink()
    refused = _reload_keys(node, 1, "curve_keys_reload_refused")
    assert refused["error"] == (f"--curve-authorized-keys {tmp_path / 'authorized'} no longer "
                                "holds this node's own public key, with which the cluster's "
                                "nodes connect to each other (they share one key pair): put "
                                "it back")
    assert node.event("curve_keys_reloaded") is None


def test_a_removed_cluster_key_is_cut_off_and_the_peers_links_go_on(start_node, node_keys,
                                                                   tmp_path, context):
    """A key removed from --cluster-authorized-keys (a node taken out of service, its
    key leaked): its connection to the cluster endpoint stayed open after the reload.
    Now the reload cuts the endpoint's connections: the removed key's handshake is
    refused from then on, the peer's link connects again and copies go both ways."""
    public, secret = security.generate(tmp_path / "keys", "retired")
    (node_keys["cluster_dirs"][0] / "retired.key").write_bytes(public.read_bytes())
    endpoints = [f"ipc://{tmp_path}/n{i}.cluster" for i in range(2)]
    n0, n1 = [_keyed_member(start_node, node_keys, i, endpoints, "--replicas", "1")
              for i in (0, 1)]
    n1.wait_stats(lambda s: s["peers"][0]["state"] == "up", message="n0 up at n1")
    retired = context.socket(zmq.DEALER)
    ClientCurve(security.load_key_pair(secret),
                node_keys["pairs"]["n0"].public).apply(retired)
    retired.setsockopt(zmq.LINGER, 0)
    events = retired.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
                                        | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    heard: list[int] = []

    def heard_of(event: int) -> bool:
        while events.poll(0):
            heard.append(recv_monitor_message(events)["event"])
        return event in heard

    try:
        retired.connect(endpoints[0])
        wait_until(lambda: heard_of(zmq.EVENT_HANDSHAKE_SUCCEEDED), 10, message="handshake")
        (node_keys["cluster_dirs"][0] / "retired.key").unlink()
        n0.process.send_signal(signal.SIGHUP)
        cut = wait_until(lambda: n0.event("curve_connections_cut"), 10, message="the cut")
        assert cut["removed"] == 0 and cut["cluster_removed"] == 1
        assert cut["by_endpoint"] == {"cluster": 2}  # the retired key's and n1's link
        wait_until(lambda: heard_of(zmq.EVENT_DISCONNECTED)
                   and heard_of(zmq.EVENT_HANDSHAKE_FAILED_AUTH), 10,
                   message="the retired key cut and refused")
        for source in (n0, n1):
            def copied(source=source) -> bool:
                with Producer(source.receive_dsn, context=context,
                              curve=source.curve) as producer:
                    answer = producer.produce([b"copied"], timeout=10)
                assert answer.ok  # stored, whatever its copy
                return not answer.replication_failed
            wait_until(copied, 30, interval=0.2, message="a copy taken again")
    finally:
        events.close(0)
        retired.close(0)


def _one_refused_call(kind: str, node, curve, context) -> str:
    """One call of a ``kind`` of client with ``curve`` that the node refuses; what its
    timeout says."""
    from pzq import aio
    from pzq.client import GroupConsumer
    from pzq.errors import ConsumeUnanswered
    from tests.support.aio import TrackedAsyncContext, run

    async def aio_call() -> None:
        aio_context = TrackedAsyncContext(context)
        if kind == "aio-producer":
            async with aio.Producer(node.receive_dsn, context=aio_context,
                                    curve=curve) as producer:
                await producer.send([b"intruder"], timeout=2)
        else:
            async with aio.GroupConsumer(node.consume_dsn, "t", "g", context=aio_context,
                                         curve=curve, timeout=2):
                pass

    with pytest.raises(TimeoutError) as timed_out:
        if kind == "producer":
            with Producer(node.receive_dsn, context=context, curve=curve) as producer:
                producer.produce([b"intruder"], timeout=2)
        elif kind == "group-consumer":
            with GroupConsumer(node.consume_dsn, "t", "g", context=context, curve=curve,
                               timeout=2):
                pass
        else:
            run(aio_call())
    if kind.endswith("group-consumer"):
        assert isinstance(timed_out.value, ConsumeUnanswered)
    return str(timed_out.value)


@pytest.mark.parametrize("kind", ["producer", "aio-producer", "group-consumer",
                                  "aio-group-consumer"])
def test_a_refused_clients_probe_leaves_no_refusal_of_its_own(start_node, keys, context,
                                                              tmp_path, kind):
    """The probe that says why a client hears nothing connected to the node's port
    first and hung up: the node logged a second refusal ('the client closed the
    connection during the handshake'), mechanism unknown, no key, a client that was
    never there."""
    secure_node = start_node(*keys["args"], consume=True)
    said = _one_refused_call(kind, secure_node, keys["stranger"], context)
    assert said.endswith(curve_probe.CLIENT_KEY_REFUSED)
    # a refusal to wait for: the probe's, had there been one, came before it
    _, secret = security.generate(tmp_path / "more", "second")
    second = ClientCurve(security.load_key_pair(secret), keys["client"].server_public)
    with Producer(secure_node.receive_dsn, context=context, curve=second) as producer:
        with pytest.raises(TimeoutError):
            producer.produce([b"marker"], timeout=1)
    second_key = second.keys.public.decode()
    wait_until(lambda: any(event.get("client_key") == second_key
                           for event in list(secure_node.events)), 10,
               message="the second stranger's refusal logged")
    refused = [(event["mechanism"], event["client_key"]) for event in list(secure_node.events)
               if event.get("event") == "handshake_refused"]
    assert refused == [("CURVE", keys["stranger"].keys.public.decode()),
                       ("CURVE", second_key)]
