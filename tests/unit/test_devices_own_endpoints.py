"""A unit test's Device binds none of a node's default endpoints: with the quick start's
node running (tcp://*:11131, tcp://*:11132, ipc:///tmp/pzq-monitor), as the README has a
newcomer leave it before running the suite, tests that named only some roles failed
with ``cannot bind --send-dsn tcp://*:11132: Address already in use``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pzq.node.device import Device


@pytest.mark.parametrize("roles, tcp", [(("receive", "consume"), False),
                                        (("receive", "consume"), True),
                                        (("receive", "send"), True)])
def test_the_roles_not_named_are_bound_privately_not_at_their_defaults(
        open_device: Callable[..., Device], roles: tuple[str, ...], tcp: bool):
    bound = open_device(roles=roles, tcp=tcp).bound()
    assert {"receive", "send", "monitor"} <= set(bound)  # a node binds them all
    for role, endpoint in bound.items():
        if role in roles and tcp:
            assert endpoint.startswith("tcp://127.0.0.1:"), (role, endpoint)
        else:
            assert endpoint.startswith("inproc://registry-"), (role, endpoint)
