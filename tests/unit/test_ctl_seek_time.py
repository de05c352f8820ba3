"""pzq-ctl group seek --to takes an ISO 8601 time, as group replay --from and --to do
(the archive page: a replay's TIME is "the message's store time, as for SEEK"), and
sends the node its µs: '--to 2026-12-01T09:00:00Z' was refused as 'not earliest,
latest, µs since the epoch or a message key'."""

from __future__ import annotations

import pytest

from pzq.cli import ctl


def request(*argv: str) -> str:
    parser = ctl.make_argument_parser()
    args = parser.parse_args(list(argv))
    ctl.check_options(parser, args)
    return ctl._request(args)


@pytest.mark.parametrize("to, sent", [
    ("2026-12-01T09:00:00Z", "1796115600000000"),
    ("2026-12-01T09:00:00", "1796115600000000"),  # without a zone: UTC
    ("2026-12-01T10:00:00+01:00", "1796115600000000"),
    ("1796115600000000", "1796115600000000"),
    ("latest", "latest"),
    ("0a1b2c3d-0000000000000007", "0a1b2c3d-0000000000000007"),
])
def test_a_seek_to_a_time_sends_its_microseconds(to, sent):
    assert request("group", "seek", "orders", "g", "--to", to) == \
        f"SEEK GROUP orders g to={sent}"


def test_a_replay_keeps_its_bounds_as_given():
    # the node reads a replay's ISO time itself (an early one in µs would be an offset)
    assert request("group", "replay", "orders", "g", "--from", "earliest", "--to",
                   "1990-01-01T00:00:00Z").endswith("to=1990-01-01T00:00:00Z")
