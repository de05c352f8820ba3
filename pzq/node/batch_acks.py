"""The answers owed to produce batches: each message of a batch is answered on its
own (refused at once, a duplicate, stored, copied to peers), and the batch's one
ACK goes once all of them are."""

from __future__ import annotations

from pzq.protocol import produce_batches as batches

Member = tuple[bytes, bytes]  # routing id, the member's token (produce_batches)


class OpenBatch:
    def __init__(self, routing_id: bytes, batch_id: bytes, count: int) -> None:
        self.routing_id = routing_id
        self.batch_id = batch_id
        self.results: list[tuple[bool, bytes]] = [(False, b"")] * count
        self.waiting = count


class BatchAcks:
    def __init__(self) -> None:
        self._members: dict[Member, tuple[OpenBatch, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._members)

    def expect(self, routing_id: bytes, batch_id: bytes, count: int) -> None:
        """A batch of ``count`` messages came: each is named by its token until answered."""
        batch = OpenBatch(routing_id, batch_id, count)
        members = self._members
        for index in range(count):
            members[routing_id, batches.member_token(batch_id, index)] = (batch, index)

    def answer(self, routing_id: bytes, token: bytes, ok: bool,
               status: bytes) -> list[bytes] | None:
        """None: not a batch's message; []: answered, the batch waits for others; else
        the batch's ACK, ready to send."""
        found = self._members.pop((routing_id, token), None)
        if found is None:
            return None
        batch, index = found
        batch.results[index] = (ok, status)
        batch.waiting -= 1
        if batch.waiting:
            return []
        return batches.encode_batch_ack(batch.routing_id, batch.batch_id, batch.results)
