"""What the rest of the node asks of the archive, and the archive of a node without one.

``ArchiveWrites`` is what a message's last holder being done asks (pzq.serving.answers):
write the message before it leaves the store, acked or given up. The node's archive
(pzq.archive.tier.archiving.Archiving) answers it; ``NoArchiving``, the null object of a
node without --archive-dir, has nothing to write, so nothing fails.
"""

from __future__ import annotations

from typing import Protocol

from pzq.archive.tier.tier import ArchiveTier
from pzq.archive.tier.topiclog import TopicLog
from pzq.delivery.inflight import InFlight
from pzq.delivery.state import DeliveryState
from pzq.errors import ConfigError
from pzq.parts import Part
from pzq.store.batch import Batch, Participant


class ArchiveWrites(Protocol):
    """False from a write: it could not be written (the message stays where it is)."""

    @property
    def writes(self) -> bool: ...  # messages go through it before their delete

    def acked(self, state: DeliveryState, batch: Batch, key: bytes, seq: int,
              now_us: int) -> bool: ...

    def acked_all(self, state: DeliveryState, batch: Batch, seqs: list[int],
                  now_us: int) -> set[int]: ...  # those not written

    def given_up_by_last_group(self, entry: InFlight, now_us: int, origin: bytes,
                               groups: tuple[str, ...]) -> bool: ...


class ArchiveLogs(Protocol):
    """The archive's topic logs as a replay reads them (pzq.archive.tier.archive.Archive;
    ``NoLogs`` without --archive-dir)."""

    @property
    def present(self) -> bool: ...

    def log(self, topic: str) -> TopicLog | None: ...


class NoLogs:
    present = False

    def log(self, topic: str) -> TopicLog | None:
        return None


class NoArchiving(Participant):
    """A node without --archive-dir: nothing to open, write, sync, close or count, and
    nothing for the loop to do (a part that does nothing)."""

    writes = False

    def acked(self, state: DeliveryState, batch: Batch, key: bytes, seq: int,
              now_us: int) -> bool:
        return True

    def acked_all(self, state: DeliveryState, batch: Batch, seqs: list[int],
                  now_us: int) -> set[int]:
        return set()

    def given_up_by_last_group(self, entry: InFlight, now_us: int, origin: bytes,
                               groups: tuple[str, ...]) -> bool:
        return True

    def open(self, now: float) -> None:
        pass

    def close(self, now: float) -> None:
        pass

    def part(self) -> Part:
        return Part()

    @property
    def tier(self) -> ArchiveTier:
        """Asked only by the archive's endpoints, which the options refuse without
        --archive-dir."""
        raise ConfigError("the archive's endpoints need --archive-dir")

    def figures(self, now: float) -> dict[str, object]:
        return {}

    @property
    def logs(self) -> ArchiveLogs:
        return NoLogs()
