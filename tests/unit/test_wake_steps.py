"""What a wake asks and polls: only the parts and store participants that do something
at a step, and the idle sockets' monitors by their descriptors (a node's loop on
inproc endpoints, driven wake by wake)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import zmq

from pzq.clock import Now
from pzq.hooks import overriding
from pzq.node.device import Device
from pzq.parts import Part
from pzq.serving.consume_endpoint import ConsumeEndpoint
from pzq.store.batch import Batch, Participant
from pzq.zmqio import Events
from tests.support.devices import wake

pytestmark = pytest.mark.timeout(30)


class Taking(Part):
    def take(self, events: Events, batch: Batch, now: Now) -> None:
        pass


class Preparing(Participant):
    def prepare(self, batch: Batch) -> None:
        pass


def test_a_step_is_asked_only_of_the_parts_and_participants_that_have_it():
    quiet, taking, patched = Part(), Taking(), Part()
    patched.finish = lambda batch, now: None  # type: ignore[method-assign]
    parts = [quiet, taking, patched]
    assert overriding(parts, Part, "take") == [taking]
    assert overriding(parts, Part, "finish") == [patched]
    assert overriding(parts, Part, "answer") == []
    idle, preparing = Participant(), Preparing()
    assert overriding([idle, preparing], Participant, "prepare") == [preparing]
    assert overriding([idle, preparing], Participant, "before_write") == []


def test_a_node_polls_its_idle_monitors_by_descriptor(open_device: Callable[..., Device]):
    device = open_device(roles=("receive", "send", "monitor", "consume"))
    consume = next(part for part in device.parts if isinstance(part, ConsumeEndpoint))
    wake(device, 0)  # the first wake reads whatever the monitors hold
    poller = zmq.Poller()
    device.interest(poller, Now.read())
    polled = [item for item, flags in poller.sockets if flags]
    assert consume.events not in polled and consume.quiet_events.fd in polled
    assert consume.socket in polled and device.parts.bound()["receive"] in polled
    assert not consume.quiet_events.unread
    assert device.poll_timeout_ms(Now.read()) != 0  # nothing to read: no wake at once
