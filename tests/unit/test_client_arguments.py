"""What every client takes, checked alike by the sync and asyncio ones before anything
waits: an endpoint that is none (pyzmq's "Invalid argument (addr='bogus')"), no
endpoint at all (a client connected to nothing waited out its timeout, saying
nothing after its colon), and a group consumer's join timeout of 0 or below (the
sync one said "Timeout value out of range", the asyncio one "no answer to CONSUME
within -1 s"). Each raises the same ValueError in either client, and no socket is
left open."""

from __future__ import annotations

import asyncio
import re

import pytest

from pzq import aio
from pzq.client import Consumer, GroupConsumer, Producer

pytestmark = pytest.mark.timeout(20)

DSN = "tcp://127.0.0.1:9"  # nothing is ever joined here: each call fails first


@pytest.mark.parametrize("options, says", [
    ({"dsn": "bogus"}, "'bogus' is not a ZeroMQ endpoint such as tcp://127.0.0.1:11131"),
    ({"dsn": []}, "no endpoint given: give the node's"),
    ({"timeout": -1}, r"timeout must be a number of seconds above 0 \(None: wait for ever\), "
                      "got -1"),
    ({"timeout": 0}, "timeout must be a number of seconds above 0"),
    ({"timeout": True}, "timeout must be a number of seconds above 0"),
])
def test_a_group_consumer_refuses_alike_in_either_client(options, says, context, aio_context):
    given = {"dsn": DSN, "topic": "t", "group": "g", **options}
    with pytest.raises(ValueError, match=says):
        GroupConsumer(context=context, **given)

    async def make() -> None:
        aio.GroupConsumer(context=aio_context, **given)
    with pytest.raises(ValueError, match=says):
        asyncio.run(make())


@pytest.mark.parametrize("options, says", [
    ({"topic": b"t"}, "topic must be a str, got bytes b't'"),
    ({"group": None}, "group must be a str, got NoneType None"),
    ({"filter": 5}, "filter must be a str, got int 5"),
    ({"window": "5"}, "window must be a whole number, got str '5'"),
    ({"window": 2.5}, "window must be a whole number, got float 2.5"),
])
def test_a_group_consumer_option_of_another_type_is_named_alike(options, says, context,
                                                                 aio_context):
    # it failed in the CONSUME's encoding: "'bytes' object has no attribute 'encode'"
    given = {"dsn": DSN, "topic": "t", "group": "g", **options}
    with pytest.raises(TypeError, match=re.escape(says)):
        GroupConsumer(context=context, **given)

    async def make() -> None:
        aio.GroupConsumer(context=aio_context, **given)
    with pytest.raises(TypeError, match=re.escape(says)):
        asyncio.run(make())


@pytest.mark.parametrize("dsn, says", [
    ("bogus", "'bogus' is not a ZeroMQ endpoint"),
    (["tcp://127.0.0.1:9", "tcp://nohost"], "'tcp://nohost' is not a ZeroMQ endpoint"),
    ([], "no endpoint given"),
])
def test_producers_and_consumers_refuse_an_endpoint_that_is_none(dsn, says, context,
                                                                 aio_context):
    for make in (lambda: Producer(dsn, context=context),
                 lambda: Consumer(dsn, context=context)):
        with pytest.raises(ValueError, match=says):
            make()

    async def make_aio() -> None:
        for make in (lambda: aio.Producer(dsn, context=aio_context),
                     lambda: aio.Consumer(dsn, context=aio_context)):
            with pytest.raises(ValueError, match=says):
                make()
    asyncio.run(make_aio())
