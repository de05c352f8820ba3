"""Partition placement and the route table's pieces, without sockets: owners spread
over the nodes, the loss of a node moves only its own partitions, every node computes
the same table, and a peer's ROUTING frame is checked before it is believed."""

from __future__ import annotations

import json
import zlib
from collections import Counter

import pytest

from pzq.cli.routes_text import routes_text
from pzq.cluster.peers import PeerTable
from pzq.cluster.placement import Placement, ranking
from pzq.cluster.routes import advertised, host_of
from pzq.errors import DecodeError
from pzq.protocol.headers import partition_of
from pzq.protocol.routing import (
    CLUSTER_PROTOCOL,
    UNVERSIONED_PROTOCOL,
    Routing,
    decode_routing,
)

NODES = [f"tcp://10.0.0.{i}:7000" for i in range(1, 6)]
TIMEOUT_S = 1.0


def placement_of(own: str, alive: set[str], now: float = 10.0) -> Placement:
    peers = PeerTable(tuple(node for node in NODES if node != own), TIMEOUT_S, 0.0)
    for endpoint in alive - {own}:
        peers.heard(endpoint, b"abcdef01", now)
    return Placement(own, peers)


def test_a_keys_partition_is_its_crc32_modulo_the_count():
    for key in (b"", b"order-17", "ü".encode()):
        assert partition_of(key, 12) == zlib.crc32(key) % 12


def test_every_node_computes_the_same_owners():
    tables = {tuple(placement_of(own, set(NODES)).owners("orders", 64, 10.0)) for own in NODES}
    assert len(tables) == 1


def test_owners_spread_over_the_nodes():
    owners = placement_of(NODES[0], set(NODES)).owners("orders", 500, 10.0)
    counts = Counter(owners)
    assert set(counts) == set(NODES)
    assert max(counts.values()) < 2 * min(counts.values()), counts


def test_a_dead_node_moves_only_its_own_partitions_each_to_its_next_candidate():
    before = placement_of(NODES[0], set(NODES)).owners("orders", 200, 10.0)
    dead = NODES[3]
    after = placement_of(NODES[0], set(NODES) - {dead}).owners("orders", 200, 10.0)
    for partition, (old, new) in enumerate(zip(before, after, strict=True)):
        if old != dead:
            assert new == old
        else:
            assert new == next(candidate for candidate in ranking("orders", partition, NODES)
                               if candidate != dead)


def test_without_a_majority_a_node_names_the_first_candidates():
    alone = placement_of(NODES[0], {NODES[0], NODES[1]})  # 2 of 5: no majority
    nominal = [ranking("orders", p, NODES)[0] for p in range(50)]
    assert alone.owners("orders", 50, 10.0) == nominal


def test_right_after_start_nobody_is_counted_down():
    starting = placement_of(NODES[0], {NODES[0]}, now=0.1)
    nominal = [ranking("orders", p, NODES)[0] for p in range(20)]
    assert starting.owners("orders", 20, 0.5) == nominal


def test_a_lone_node_owns_everything():
    lone = Placement("this-node", None)
    assert lone.owned("orders", 8, 1.0) == list(range(8))


@pytest.mark.parametrize(("endpoint", "host", "wanted"), [
    ("tcp://*:11131", "10.0.0.7", "tcp://10.0.0.7:11131"),
    ("tcp://0.0.0.0:11131", "10.0.0.7", "tcp://10.0.0.7:11131"),
    ("tcp://[::]:11131", "10.0.0.7", "tcp://10.0.0.7:11131"),
    ("tcp://192.168.1.2:11131", "10.0.0.7", "tcp://192.168.1.2:11131"),
    ("ipc:///tmp/pzq-monitor", "10.0.0.7", "ipc:///tmp/pzq-monitor"),
])
def test_a_wildcard_endpoint_is_advertised_with_the_cluster_host(endpoint, host, wanted):
    assert advertised(endpoint, host) == wanted


def test_the_cluster_host_is_taken_from_the_cluster_endpoint():
    assert host_of("tcp://10.1.2.3:7000") == "10.1.2.3"
    assert host_of("tcp://[::1]:7000") == "[::1]"
    assert host_of("ipc:///tmp/x") == "127.0.0.1"


def test_a_routing_frame_round_trips():
    routing = Routing({"receive": "tcp://a:1", "monitor": "tcp://a:3"}, {"orders": 6})
    assert decode_routing(routing.encode()) == routing
    assert routing.protocol == CLUSTER_PROTOCOL


def test_a_routing_frame_without_a_protocol_is_of_a_release_before_versions():
    routing = decode_routing(b'{"endpoints": {"receive": "tcp://a:1"}, "partitions": {}}')
    assert routing.protocol == UNVERSIONED_PROTOCOL == 1
    assert decode_routing(b'{"protocol": 9, "spoken_later": [1]}').protocol == 9


@pytest.mark.parametrize("blob", [
    b"not json", b"[]", b'{"endpoints": {"shout": "tcp://a:1"}}',
    b'{"endpoints": {"receive": 7}}', b'{"partitions": {"orders": 0}}',
    b'{"partitions": {"orders": "6"}}', b'{"partitions": {"../x": 6}}',
    b'{"partitions": []}', b'{"partitions": {"orders": true}}',
    b'{"protocol": 0}', b'{"protocol": "2"}', b'{"protocol": true}',
])
def test_a_malformed_routing_frame_is_refused(blob):
    with pytest.raises(DecodeError):
        decode_routing(blob)


def test_the_route_table_reads_as_lines():
    table = {"node": "n1", "nodes": {"n1": {"state": "self", "receive": "tcp://a:1"},
                                     "n2": {"state": "down"}},
             "topics": {"orders": {"partitions": 2, "owners": ["n1", "n2"]}}}
    text = routes_text(json.dumps(table).encode())
    assert "n1 self receive=tcp://a:1" in text
    assert "n2 down (endpoints not known yet)" in text
    assert "topic orders: 2 partitions" in text
    assert "partition 1 owner n2 receive=?" in text
