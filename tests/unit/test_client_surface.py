"""What a user of pzq.client and pzq.aio reads and calls, held together: each twin
takes the same options by the same names with the same defaults (the asyncio page:
"the same names and options"), every public class, function, method and property has
a docstring (the API reference is made of them: one without is absent from the
page), the errors a caller catches come from either package and share one base, and a
delivery or a STATS answer prints as one readable log line."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import pzq.aio
import pzq.client
from pzq.client import Message, StatsAnswer
from pzq.errors import ClientClosed, ConsumeRefused, ConsumeUnanswered, EndpointError, PzqError

pytestmark = pytest.mark.timeout(20)

# Options one twin has and the other has not, each for a reason a user can read in
# the docs: a sync wait's progress line (``notice``), a routed consumer's own join
# (``wait``), the sync send's own message id (pzq.aio's is on ``publish``).
SYNC_ONLY = {"notice", "wait", "msg_id"}
# A pair whose results differ on purpose (pzq.aio's send returns the ACK, as the sync
# ``produce`` does; the sync send returns the message id): compared by options only.
SHARED = sorted(name for name in pzq.aio.__all__ if name in pzq.client.__all__
                and getattr(pzq.aio, name) is not getattr(pzq.client, name))


def callables(obj: Any) -> dict[str, Any]:
    """The callable itself, or a class's constructor and public methods by name."""
    if not inspect.isclass(obj):
        return {"": obj}
    found = {"": obj}
    for name, value in inspect.getmembers(obj):
        raw = inspect.getattr_static(obj, name)
        if not name.startswith("_") and inspect.isfunction(raw):
            found[name] = value
    return found


def options(function: Any) -> dict[str, Any]:
    return {name: parameter.default
            for name, parameter in inspect.signature(function).parameters.items()
            if name != "self" and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                          inspect.Parameter.VAR_KEYWORD)}


@pytest.mark.parametrize("name", SHARED)
def test_each_twin_takes_the_same_options_with_the_same_defaults(name):
    sync, asyncio_ = callables(getattr(pzq.client, name)), callables(getattr(pzq.aio, name))
    for member in sync.keys() & asyncio_.keys():
        given, awaited = options(sync[member]), options(asyncio_[member])
        where = f"{name}{'.' + member if member else ''}"
        assert sorted(awaited.keys() - given.keys()) == [], where
        assert sorted(given.keys() - awaited.keys() - SYNC_ONLY) == [], where
        differ = {option: (given[option], awaited[option])
                  for option in given.keys() & awaited.keys()
                  if given[option] != awaited[option]}
        assert differ == {}, where


def test_the_sync_consumer_shows_its_own_options_not_new_s():
    """Consumer has a __new__ for a deprecated call: inspect and help() showed
    ``Consumer(*args, **kwargs)``."""
    assert list(inspect.signature(pzq.client.Consumer).parameters) == [
        "dsn", "context", "prefetch", "curve"]


@pytest.mark.parametrize("package", [pzq.client, pzq.aio], ids=["client", "aio"])
def test_everything_a_client_package_exports_says_what_it_does(package):
    undocumented = []
    for name in package.__all__:
        obj = getattr(package, name)
        if not inspect.getdoc(obj):
            undocumented.append(name)
        if not inspect.isclass(obj):
            continue
        for member in dir(obj):
            raw = inspect.getattr_static(obj, member)
            if isinstance(raw, staticmethod):
                raw = raw.__func__
            if not member.startswith("_") and (inspect.isfunction(raw)
                                               or isinstance(raw, property)) \
                    and not raw.__doc__:
                undocumented.append(f"{name}.{member}")
    assert undocumented == []


@pytest.mark.parametrize("package", [pzq.client, pzq.aio], ids=["client", "aio"])
def test_the_errors_a_caller_catches_come_from_either_package_under_one_base(package):
    for error in (ClientClosed, ConsumeRefused, ConsumeUnanswered, EndpointError, PzqError):
        assert getattr(package, error.__name__) is error and error.__name__ in package.__all__
        assert issubclass(error, PzqError)
    silent = ConsumeUnanswered(10, "nothing answers there (is the node running?)")
    assert isinstance(silent, TimeoutError) and isinstance(silent, PzqError)
    assert str(silent) == ("no answer to CONSUME within 10 s: nothing answers there "
                           "(is the node running?)")


def delivery(parts: tuple[bytes, ...]) -> Message:
    return Message(key=b"9a4843f7-0000000000000001", parts=parts, headers={"TOPIC": "orders"},
                   sent_us=1_700_000_000_000_000, ack_timeout_us=5_000_000, peer=b"",
                   _consumer=None)


def test_a_delivery_prints_a_long_body_shortened_and_a_short_one_whole():
    assert repr(delivery((b"hello",))) == (
        "Message(key=b'9a4843f7-0000000000000001', parts=(b'hello',), "
        "headers={'TOPIC': 'orders'}, sent_us=1700000000000000, ack_timeout_us=5000000, "
        "peer=b'')")
    shown = repr(delivery((b"x" * 4096, b"tail")))
    assert f"parts=({b'x' * 48!r}... (4096 B), b'tail')" in shown and len(shown) < 250
    many = repr(delivery(tuple(b"%d" % n for n in range(100))))
    assert "b'7', ... (100 parts))" in many and "b'8'" not in many


def test_a_stats_answer_prints_its_node_and_how_many_fields_not_every_figure():
    figures = {f"field_{n}": n for n in range(300)}
    assert repr(StatsAnswer("tcp://127.0.0.1:11133", figures)) == (
        "StatsAnswer(dsn='tcp://127.0.0.1:11133', 300 fields)")
    assert repr(StatsAnswer("tcp://127.0.0.1:11133", None, "no answer within 5 s")) == (
        "StatsAnswer(dsn='tcp://127.0.0.1:11133', error='no answer within 5 s')")

