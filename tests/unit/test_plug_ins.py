"""How parts plug into a node: the event hub they subscribe to, the parts' list that
places their figures and gathers their monitor verbs, each endpoint's declaration and
what follows from it (its option row and checks, each shard's endpoint, its exporter
metrics), the consumer verbs' tables, and the config's units."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import zmq
from prometheus_client.core import Metric

from pzq.admin.monitor import OPEN_VERBS
from pzq.client.monitor import StatsAnswer
from pzq.clock import Now
from pzq.endpoints import SHARD_CLUSTER, Endpoint
from pzq.endpoints import Metric as Declared
from pzq.errors import ConfigError
from pzq.events import EventHub, PeersReleased
from pzq.monitoring.endpoint_metrics import endpoint_families
from pzq.node.endpoints import ENDPOINTS, PLUG_INS
from pzq.node.options import OPTIONS_BY_NAME, build_config
from pzq.node.shard_layout import BASE_BROADCAST, shard_overrides
from pzq.parts import Figures, Part, Parts, Verb
from pzq.protocol import consume as wire
from pzq.serving.consume_endpoint import ConsumeEndpoint
from tests.support.devices import wake

pytestmark = pytest.mark.timeout(30)
NOW = Now(1_000_000, 1.0)


@dataclass(frozen=True)
class Happened:
    what: str


def test_the_hub_calls_each_kinds_handlers_in_the_order_they_subscribed():
    hub, heard = EventHub(), []
    hub.subscribe(Happened, lambda event: heard.append(("first", event.what)))
    hub.subscribe(PeersReleased, lambda event: heard.append(("released", "")))
    hub.subscribe(Happened, lambda event: heard.append(("second", event.what)))
    hub.publish(Happened("x"))
    assert heard == [("first", "x"), ("second", "x")]
    assert hub.heard(Happened) and not hub.heard(str)
    hub.publish("nobody listens")  # an event nobody subscribed to goes nowhere
    assert len(heard) == 2


class Sectioned(Part):
    def __init__(self, figures: Figures, verbs: dict[bytes, Verb] | None = None) -> None:
        self._figures = figures
        self._verbs = verbs or {}

    def figures(self, now: Now) -> Figures:
        return self._figures

    def verbs(self) -> dict[bytes, Verb]:
        return self._verbs


def test_parts_place_their_figures_in_their_sections_and_gather_their_verbs():
    parts = Parts()
    parts.add(Sectioned({"messages": 3}, {b"A": lambda arguments, now: b"a"}))
    parts.add(Sectioned({"written": 1}), "zper_writer", ("zper", "writer"))
    parts.add(Sectioned({"published": 2}, {b"B": lambda arguments, now: b"b"}),
              "zper_ack", ("zper", "ack"))
    parts.add(Sectioned({}), "quiet", ("nothing",))
    assert parts.figures(NOW) == {"messages": 3, "zper": {"writer": {"written": 1},
                                                          "ack": {"published": 2}}}
    assert list(parts.verbs()) == [b"A", b"B"]


def test_every_endpoint_has_its_option_row_and_its_checks():
    for endpoint in ENDPOINTS:
        option = OPTIONS_BY_NAME[endpoint.option]
        assert (option.flag, option.default, option.help) == (
            endpoint.flag, endpoint.default, endpoint.help)
        with pytest.raises(ConfigError, match=f"{endpoint.flag} 'nowhere' is not a ZeroMQ"):
            build_config({endpoint.option: "nowhere"})
        for needed in endpoint.needs:
            with pytest.raises(ConfigError, match=f"{endpoint.flag} needs --"
                                                  f"{needed.replace('_', '-')}"):
                build_config({endpoint.option: "tcp://127.0.0.1:7000"})
    assert {plug_in.endpoint.role for plug_in in PLUG_INS} == {
        "archive", "zper_writer", "zper_ack", "zper_relay"}


def test_every_endpoint_is_each_shards_own():
    given = {endpoint.option: f"tcp://127.0.0.1:{7000 + 10 * number}"
             for number, endpoint in enumerate(ENDPOINTS)}
    config = build_config({**given, "archive_dir": "archive"})
    second = shard_overrides(config, BASE_BROADCAST, 1)
    for endpoint in ENDPOINTS:
        base = BASE_BROADCAST if endpoint.shard == SHARD_CLUSTER else given[endpoint.option]
        port = int(base.rpartition(":")[2])
        assert second[endpoint.option] == f"tcp://127.0.0.1:{port + 10}", endpoint.role


def families(answers: list[StatsAnswer], declared: Endpoint) -> dict[str, Metric]:
    return {metric.name: metric for metric in
            endpoint_families(answers, lambda answer: ["n", answer.dsn], (declared,))}


def test_an_endpoints_metrics_follow_from_its_declaration():
    declared = Endpoint("thing", "thing_dsn", "a thing", stats=("zper", "thing"), metrics=(
        Declared("pzq_things", "done", "Things done."),
        Declared("pzq_things_waiting", "waiting", "Things waiting.", counter=False)))
    answers = [StatsAnswer("with", {"zper": {"thing": {"done": 4, "waiting": 1}}}),
               StatsAnswer("sibling", {"zper": {"other": {"done": 9}}}),
               StatsAnswer("without", {"messages": 0})]
    found = families(answers, declared)
    assert found["pzq_things"].type == "counter" and found["pzq_things_waiting"].type == "gauge"
    assert [(sample.labels["monitor"], sample.value)
            for sample in found["pzq_things"].samples if sample.name == "pzq_things_total"] \
        == [("with", 4.0), ("sibling", 0.0)]
    assert [(sample.labels["monitor"], sample.value)
            for sample in found["pzq_things_waiting"].samples] == [("with", 1.0),
                                                                   ("sibling", 0.0)]


def test_every_consumer_verb_has_a_handler(open_device):
    device = open_device(roles=("receive", "send", "monitor", "consume"))
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    assert set(consume.handlers) == set(wire.REQUESTS) - {wire.CONSUME}
    assert wire.VERBS_TEXT == "send CONSUME, ACK, NACK, WORKING, REJECT, HEARTBEAT or BYE"


def test_the_monitors_verbs_are_its_own_then_those_the_parts_contribute(open_device):
    device = open_device()
    monitor = list(device.parts)[-1]
    assert list(monitor.table) == [
        b"MONITOR", b"STATS", b"PING", b"REPLAY", b"REPLAYS", b"BACKUP", b"DEAD", b"REQUEUE",
        b"PURGE", b"PENDING", b"ROUTES", b"TOPICS", b"DECLARE", b"REMOVE", b"EMPTY", b"SEEK"]
    # the verbs every key may ask under --authorization are verbs of the table
    assert OPEN_VERBS <= set(monitor.table)


def test_durations_are_kept_in_microseconds_and_given_to_each_part_in_its_unit():
    config = build_config({"archive_dir": "a", "flush_interval": 250, "retain_hours": 2,
                           "relay_poll": 300, "consume_heartbeat": 1_500_000})
    assert (config.flush_interval_us, config.retain_us, config.relay_poll_us) == (
        250_000, 2 * 3_600_000_000, 300_000)
    assert config.archive is not None
    assert (config.archive.flush_interval_ms, config.archive.retain_hours) == (250, 2)
    assert (config.consume_heartbeat_ms, config.consume_heartbeat_s) == (1500, 1.5)


def test_a_request_its_descriptor_no_longer_tells_is_answered_without_waiting(open_device,
                                                                           open_socket):
    """The monitor's descriptor signals once: a request that came just before the monitor
    looked whether input is left (which takes the signal) must not wait for another
    event to wake the loop (a node's first PING went unanswered for 10 s so)."""
    device = open_device()
    monitor = list(device.parts)[-1]
    wake(device)  # the monitor looks once at the start: nothing yet
    asker = open_socket(zmq.DEALER)
    asker.connect(device.bound()["monitor"])
    asker.send_multipart([b"", b"PING"])
    deadline = time.monotonic() + 5
    while not monitor.quiet.unread:
        monitor.quiet.served()  # as after a wake's answers
        assert time.monotonic() < deadline, "the request never reached the monitor"
    assert device.poll_timeout_ms(Now.read()) == 0
    wake(device)
    assert asker.poll(1000) and asker.recv_multipart() == [b"", b"PONG"]
