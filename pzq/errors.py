"""One error hierarchy for pzq, rooted in PzqError; each error names the exit code
the daemon and the tools end with when it stops them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # stopped on request, everything handed back (tools: done)
    FAILURE = 1  # an unexpected error, the log says which (tools: refused or unhealthy)
    USAGE = 2  # a bad option, value or config file
    STORE = 3  # the daemon: the database or archive could not be opened or written
    BIND = 4  # the daemon: an endpoint could not be bound (in use, bad address)
    INTERRUPTED = 130  # a second stop signal: exited at once without handing back


# Tools give 3 other meanings than the daemon's, each named where it is used:
NO_ANSWER = ExitCode.STORE  # pzq-monitor: the node did not answer in time
EXISTS = ExitCode.STORE  # pzq-keygen: the key pair is there already (give --force)


class PzqError(Exception):
    """Base class of every error pzq raises on purpose."""

    exit_code = ExitCode.FAILURE


class ConfigError(PzqError):
    """An option or config file value is missing, unknown or out of range."""

    exit_code = ExitCode.USAGE


class StoreError(PzqError):
    """The LevelDB store could not be opened, read or written."""

    exit_code = ExitCode.STORE


class StoreUnrecoverable(StoreError):
    """The store could not be reopened after a failed write: the node stops (what was
    ACKed is on disk) rather than write where a crash could lose it."""


class StoreDamaged(StoreUnrecoverable):
    """A read met damaged data in the store (a checksum that does not match): the node
    stops, naming the repair, rather than skip messages it cannot read."""


class ArchiveError(PzqError):
    """The archive could not be written or opened (a full disk, a file size limit, ...)."""

    exit_code = ExitCode.STORE

    def __init__(self, message: str, written: int = 0) -> None:
        super().__init__(message)
        # Of a write of several records: how many of the first went in before it failed
        # (those a roll to a new segment had put in; the rest are none of them).
        self.written = written


class DecodeError(PzqError):
    """A frame layout from the wire or the store could not be decoded."""


class ConsumeRefused(PzqError):
    """The node answered a consumer's CONSUME with ERROR; the text says why."""


class ConsumeUnanswered(TimeoutError, PzqError):
    """A group consumer's CONSUME had no answer within ``waited`` seconds; ``reason``
    says what a probe of its endpoint found (nothing there, a refused handshake...).
    The sync and the asyncio consumers raise it; a tool that probes further says its
    own reason in the same words: ``ConsumeUnanswered(exc.waited, its_reason)``.
    A TimeoutError (caught with the other timeouts) and a PzqError (with pzq's own)."""

    def __init__(self, waited: float, reason: str) -> None:
        super().__init__(f"no answer to CONSUME within {waited:g} s: {reason}")
        self.waited = waited
        self.reason = reason


class ClientClosed(PzqError):
    """A client was used after its ``close()``, or closed while a call waited; a
    message closed before its ACK came has this as its answer."""


class ArchiveFormatError(DecodeError):
    """Archive bytes that are not whole ZPER records; ``offset`` is the first bad byte."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at byte {offset}")
        self.reason = message
        self.offset = offset


class TornRecordError(ArchiveFormatError):
    """A record whose frames run past the end of the bytes at hand (a torn write)."""


class DamagedRecordError(ArchiveFormatError):
    """A damaged archive record, met by a reader told to fail on one (Spark's FAILFAST)."""

    def __init__(self, description: str, topic: str, segment: str, offset: int) -> None:
        DecodeError.__init__(self, description)
        self.reason = description
        self.topic = topic
        self.segment = segment
        self.offset = offset


class ReaderError(PzqError):
    """An archive reader socket answered with an error status (ZPER's status byte)."""

    def __init__(self, status: int) -> None:
        why = READER_STATUSES.get(status)
        super().__init__(f"archive reader answered status {status}"
                         + (f": {why}" if why else ""))
        self.status = status


def reader_refusal(dsn: str, status: bytes) -> ReaderError:
    """What a reply whose first frame is not OK raises: ReaderError with ZPER's status,
    or, for a first frame that is no status byte (another endpoint of the node, such
    as its --monitor-dsn, answered), NotAnArchiveReader saying so."""
    if len(status) == 1:
        return ReaderError(status[0])
    shown = status[:40] + (b"..." if len(status) > 40 else b"")
    return NotAnArchiveReader(dsn, f"answered {shown!r}, which is no archive reader's "
                                   "status byte")


def dealer_at(dsn: str, after_s: float) -> NotAnArchiveReader:
    """An archive reader's request unanswered where a DEALER (no ROUTER) answers."""
    return NotAnArchiveReader(dsn, f"did not answer within {after_s:g} s, and a DEALER "
                                   "answers there (no ROUTER), as at a node's --send-dsn")


class NotAnArchiveReader(ReaderError):
    """The endpoint an archive reader was given is no archive reader."""

    def __init__(self, dsn: str, why: str) -> None:
        PzqError.__init__(self, f"{dsn} {why}: give the node's --archive-dsn")
        self.status = -1  # no status: not a ZPER one, so never taken for 101
        self.dsn = dsn


READER_STATUSES = {
    101: "no such offset (not a record's start, or past the end)",
    102: "not a request this reader knows",
    103: "forbidden: this client's key may not read the topic's archive (the node's "
         "--authorization gives it no consume right over every group of the topic)",
    255: "the node failed to read its archive",
}


class ProduceRefused(PzqError):
    """A producer message that is not stored; answered with ACK "0" and the reason."""

    def __init__(self, reason: str, routing_id: bytes, msg_id: bytes) -> None:
        super().__init__(reason)
        self.reason = reason
        self.routing_id = routing_id
        self.msg_id = msg_id


class QueueFull(ProduceRefused):
    """The node holds --max-messages or --max-bytes: refused, never dropped."""

    def __init__(self, routing_id: bytes, msg_id: bytes) -> None:
        super().__init__("QUEUE_FULL", routing_id, msg_id)


class BindError(PzqError):
    """The daemon could not bind an endpoint (in use, another node there, bad address)."""

    exit_code = ExitCode.BIND


class EndpointError(PzqError):
    """A client cannot use an endpoint: it is malformed, cannot be connected to, or
    answers in another protocol than the client's."""

    exit_code = ExitCode.USAGE


class WorkerFailed(PzqError):
    """A benchmark's load generator died, or did not answer in time."""
