"""A delivered message as every client shell hands it out: its fields here, its
answers (``ack``, ``nack``, ...) on the shell's own ``Message``, which asks the
consumer that received it (``_consumer``).

A delivery is a tuple underneath, its fields read by name (in C): a session makes a
batch's deliveries in one pass (``deliveries``) without a Python call for each.
Otherwise it behaves as a plain record: equal to a delivery of its class with equal
fields, unhashable, not iterable, its fields read-only, copied and pickled whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import is_not, itemgetter
from typing import Any, NoReturn, TypeVar

from pzq.protocol.frames import delivery_count

FIELDS = ("key", "parts", "headers", "sent_us", "ack_timeout_us", "peer")
SHOWN_BYTES = 48  # of a longer part, repr shows this many bytes and the length
SHOWN_PARTS = 8  # of more parts, repr shows this many and how many there are
Row = tuple[bytes, tuple[bytes, ...], dict[str, str], int, int, bytes, Any]


class Delivered(tuple[Any, ...]):
    """One delivery. ``peer``: the node's routing id on ``--send-dsn`` (empty on
    ``--consume-dsn``, whose connection is the consumer's own)."""

    __slots__ = ()

    def __new__(cls: type[D], key: bytes, parts: tuple[bytes, ...], headers: dict[str, str],
                sent_us: int, ack_timeout_us: int, peer: bytes, _consumer: Any) -> D:
        return tuple.__new__(cls, (key, parts, headers, sent_us, ack_timeout_us, peer,
                                   _consumer))

    key: bytes = property(itemgetter(0))  # type: ignore[assignment]
    parts: tuple[bytes, ...] = property(itemgetter(1))  # type: ignore[assignment]
    headers: dict[str, str] = property(itemgetter(2))  # type: ignore[assignment]
    sent_us: int = property(itemgetter(3))  # type: ignore[assignment]
    ack_timeout_us: int = property(itemgetter(4))  # type: ignore[assignment]
    peer: bytes = property(itemgetter(5))  # type: ignore[assignment]
    _consumer: Any = property(itemgetter(6))  # the shell that answers for it

    @property
    def deadline_us(self) -> int:
        """When the node delivers it again if no answer came: µs since the epoch."""
        return self.sent_us + self.ack_timeout_us

    @property
    def deliveries(self) -> int | None:
        """How often this message was delivered; None unless the node runs with
        --delivery-headers (the original layout carries no count)."""
        return delivery_count(self.headers)

    def __repr__(self) -> str:
        """Every field, as a record's; a long body shortened so a log line stays one:
        a part past SHOWN_BYTES as its first bytes and its size (``b'...'... (4096
        B)``), past SHOWN_PARTS parts the first ones and how many there are."""
        shown = {name: repr(value) for name, value in zip(FIELDS, self[:6], strict=True)}
        parts = self.parts
        if len(parts) > SHOWN_PARTS or any(len(part) > SHOWN_BYTES for part in parts):
            texts = [short_bytes(part) for part in parts[:SHOWN_PARTS]]
            if len(parts) > SHOWN_PARTS:
                texts.append(f"... ({len(parts)} parts)")
            shown["parts"] = "(" + ", ".join(texts) + ")"
        fields = ", ".join(f"{name}={text}" for name, text in shown.items())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return tuple.__ne__(self, other)

    __hash__ = None  # type: ignore[assignment]  # a record with a dict in it

    def __iter__(self) -> NoReturn:
        raise TypeError(f"a {type(self).__name__} is not iterable: read its fields")

    def __getnewargs__(self) -> tuple[Any, ...]:  # copy and pickle: __new__'s arguments
        return self[:]

    def _replace(self: D, **changes: Any) -> D:
        """A copy with the named fields changed (as a named tuple's ``_replace``; it
        answers to the same consumer)."""
        fields = dict(zip(FIELDS, self[:6], strict=True))
        unknown = changes.keys() - fields.keys()
        if unknown:
            raise TypeError(f"a {type(self).__name__} has no field {', '.join(sorted(unknown))}")
        fields.update(changes)
        return type(self)(**fields, _consumer=self[6])

    __replace__ = _replace  # copy.replace (Python 3.13)


D = TypeVar("D", bound=Delivered)
M = TypeVar("M", bound=Delivered)
MakeMessage = type[M]  # the shell's message class


def short_bytes(part: bytes) -> str:
    """A part as repr shows it: whole up to SHOWN_BYTES, else its start and size."""
    if len(part) <= SHOWN_BYTES:
        return repr(part)
    return f"{part[:SHOWN_BYTES]!r}... ({len(part)} B)"


def deliveries(make: type[M], rows: Iterable[Row]) -> Iterator[M]:
    """A delivery of class ``make`` from each row (its fields in FIELDS' order, then
    the consumer), each made in C."""
    return map(tuple.__new__, repeat(make), rows)


_KEY = itemgetter(0)  # a delivery's key, read as its tuple's item (not by its property)
_OWNER = itemgetter(6)  # the consumer that received it

NOT_OWN = ("a delivery received by another consumer was given to this one to answer "
           "(its key would answer this consumer's own delivery of the same message, of "
           "another group, or none, and leave it out until its ack deadline): answer it "
           "with message.ack() (nack, ...) or the consumer it came from; nothing was sent")


def keys_of(messages: Iterable[Delivered]) -> list[bytes]:
    """The deliveries' keys, read in C (an ACK's, a NACK's)."""
    return list(map(_KEY, messages))


def own_keys(messages: Iterable[Delivered], owner: object, forgot_upto_us: int = 0
             ) -> list[bytes]:
    """The keys of deliveries ``owner`` received, to answer them there (in C, as
    ``keys_of``); ValueError, before anything is sent, if one came from another
    consumer: a key names a message, not a delivery, so another group's delivery of
    the same message (the same key) would be answered in its place.
    ``forgot_upto_us``: deliveries the node sent at or before it (its clock) it has
    forgotten since (see GroupSession.forgot_upto_us): left out, for a NACK of one
    would give back the node's delivery of the same message made since."""
    if not isinstance(messages, (list, tuple)):
        messages = list(messages)
    if any(map(is_not, map(_OWNER, messages), repeat(owner))):
        raise ValueError(NOT_OWN)
    if forgot_upto_us and messages:
        return [message[0] for message in messages if message[3] > forgot_upto_us]
    return list(map(_KEY, messages))


def own_key(message: Delivered, owner: object, forgot_upto_us: int = 0) -> list[bytes]:
    """``own_keys`` of one delivery."""
    if message[6] is not owner:
        raise ValueError(NOT_OWN)
    if forgot_upto_us and message[3] <= forgot_upto_us:
        return []
    return [message[0]]
