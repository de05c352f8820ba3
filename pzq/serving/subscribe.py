"""Which group a CONSUME (or an operator's DECLARE GROUP) names, made when new, and
whether the client's key may consume it (pzq.authorization), also after new rules.

A new group's start is fixed here: ``earliest`` every message still stored,
``latest`` the next new one, a time the first message stored at or after it.
Every refusal is a DecodeError whose text the consumer gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import zmq

from pzq.authorization import CONSUME, Authorization
from pzq.errors import DecodeError
from pzq.logs import get_logger
from pzq.protocol import consume as consume_wire
from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.serving.holding import ServedConsumer
from pzq.store import keyspace
from pzq.store.batch import Batch
from pzq.store.topics import Group, Topic, Topics

log = get_logger("pzq.consume")

KnownElsewhere = Callable[[str, str], object]  # topic, group: a down node's, if truthy


def named_group(topics: Topics, batch: Batch, subscribe: consume_wire.Subscribe, now_us: int,
                taken_over: KnownElsewhere) -> Group:
    """The group a CONSUME names, made when new."""
    if subscribe.group == DEFAULT_GROUP:
        raise DecodeError("the group default is the consumers on --send-dsn; name "
                          "another group")
    topic = topics.topics.get(subscribe.topic)
    if topic is None and (subscribe.declare or taken_over(subscribe.topic, subscribe.group)):
        # declared by its consumer (DECLARE:1), or a down node's group
        try:
            topic = topics.topic(subscribe.topic, now_us)
        except ValueError as exc:
            raise DecodeError(str(exc)) from None
    if topic is None:
        known = ", ".join(sorted(topics.topics)) or "none yet"
        raise DecodeError(f"no topic {subscribe.topic[:60]!r} (topics: {known}); produce "
                          "to it or declare it first")
    group = topic.groups.get(subscribe.group)
    if group is None:
        return make_group(topics, batch, topic, subscribe.group, subscribe.start,
                          subscribe.filter, now_us)
    if subscribe.filter and group.filter != subscribe.filter:  # none: as the group is
        raise DecodeError(f"group {group.name} of topic {topic.name} has filter "
                          f"{group.filter!r}, not {subscribe.filter!r}")
    return group


def make_group(topics: Topics, batch: Batch, topic: Topic, name: str, start: str | int,
               pattern: str, now_us: int) -> Group:
    try:
        group = topics.add_group(topic, name, start_seq(topics, topic, start), pattern,
                                 now_us)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    batch.put(keyspace.group_key(topic.id, name.encode()), group.encode())
    log.info("group_created", topic=topic.name, group=name, start=str(start),
             filter=pattern, start_seq=group.start_seq)
    return group


def start_seq(topics: Topics, topic: Topic, start: str | int) -> int:
    if start == consume_wire.START_WORDS[0]:
        return 0
    if start == consume_wire.START_WORDS[1] or not isinstance(start, int):
        return topics.store.next_seq
    return topics.first_stored_since(topic, start)


def check_allowed(authorization: Authorization, first: zmq.Frame,
                  subscribe: consume_wire.Subscribe) -> None:
    """A key may consume only the groups its rights name (pzq.authorization); a
    refused CONSUME makes and changes nothing. ``first``: the request's first frame
    (with CURVE, it carries the client's key)."""
    if not authorization.of(first).may_consume(subscribe.topic, subscribe.group):
        authorization.refused(CONSUME, f"{subscribe.topic}:{subscribe.group}",
                              authorization.key_of(first))
        raise DecodeError(f"FORBIDDEN consume {subscribe.topic}:{subscribe.group}: "
                          "this client key may not consume that group of that topic "
                          "(see the node's --authorization file)")


def no_longer_allowed(authorization: Authorization, consumers: Iterable[ServedConsumer]
                      ) -> list[tuple[ServedConsumer, str]]:
    """After new rules: the consumers whose key may no longer consume their group (each
    counted as a refused CONSUME), with what they are told."""
    refused = []
    for consumer in consumers:
        group = consumer.group
        if not authorization.rights(consumer.key).may_consume(group.topic, group.name):
            authorization.refused(CONSUME, f"{group.topic}:{group.name}", consumer.key)
            why = ("this client key was removed from the node's --curve-authorized-keys"
                   if authorization.revoked_key(consumer.key)
                   else "the node's --authorization rules changed")
            refused.append((consumer, f"FORBIDDEN consume {group.topic}:{group.name}: {why}"))
    return refused
