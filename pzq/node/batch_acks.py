"""The answers owed to produce batches: each message of a batch is answered on its
own (refused at once, a duplicate, stored, copied to peers), or a run of them at
once (stored together), and the batch's one ACK goes once all of them are.

A member is named by its token (pzq.protocol.produce_batches.member_token): the
batch id and its index, read back from the token when it is answered, so that a
batch costs one entry here and not one per message.
"""

from __future__ import annotations

from pzq.protocol import produce_batches as batches
from pzq.protocol.batch_runs import member_token

Result = tuple[bool, bytes]


class OpenBatch:
    __slots__ = ("batch_id", "results", "routing_id", "waiting")  # (one a produce batch)

    def __init__(self, routing_id: bytes, batch_id: bytes, count: int) -> None:
        self.routing_id = routing_id
        self.batch_id = batch_id
        self.results: list[Result | None] = [None] * count  # None: not answered yet
        self.waiting = count


class BatchAcks:
    def __init__(self) -> None:
        # by routing id, batch id (asked as ``open``, not by a call, on every ACK)
        self.open: dict[tuple[bytes, bytes], OpenBatch] = {}

    def __bool__(self) -> bool:
        return bool(self.open)

    def expect(self, routing_id: bytes, batch_id: bytes, count: int) -> OpenBatch:
        """A batch of ``count`` messages came: each is named by its token until answered."""
        batch = self.open[routing_id, batch_id] = OpenBatch(routing_id, batch_id, count)
        return batch

    def answer(self, routing_id: bytes, token: bytes, ok: bool,
               status: bytes) -> list[bytes] | None:
        """None: not a batch's message; []: answered, the batch waits for others; else
        the batch's ACK, ready to send."""
        batch_id, sep, index_text = token.rpartition(b"\x00")
        batch = self.open.get((routing_id, batch_id)) if sep else None
        if batch is None or not index_text.isdigit():
            return None
        index = int(index_text)
        if (index >= len(batch.results) or batch.results[index] is not None
                or member_token(batch_id, index) != token):
            return None  # no member of the batch (or one answered already)
        batch.results[index] = (ok, status)
        batch.waiting -= 1
        return self._settled(batch)

    def answer_run(self, batch: OpenBatch, first: int, count: int) -> list[bytes]:
        """The members ``first`` to ``first + count`` of ``batch`` are stored (ok, no
        status message): [] while the batch waits for others, else its ACK."""
        if count == batch.waiting == len(batch.results):  # the whole batch, one run
            batch.waiting = 0
            if self.open.get((batch.routing_id, batch.batch_id)) is batch:
                del self.open[batch.routing_id, batch.batch_id]
            return batches.encode_stored_batch_ack(batch.routing_id, batch.batch_id, count)
        batch.results[first:first + count] = [OK] * count
        batch.waiting -= count
        return self._settled(batch)

    def _settled(self, batch: OpenBatch) -> list[bytes]:
        if batch.waiting:
            return []
        if self.open.get((batch.routing_id, batch.batch_id)) is batch:
            del self.open[batch.routing_id, batch.batch_id]
        results: list[Result] = batch.results  # type: ignore[assignment]  # all answered
        return batches.encode_batch_ack(batch.routing_id, batch.batch_id, results)


OK: Result = (True, b"")
