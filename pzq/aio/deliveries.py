"""What every asyncio consumer does with its ``receive``: ``async for`` over every
delivery until the consumer is closed, and ``messages`` until none comes a while."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Self

from pzq.aio.message import Message
from pzq.errors import ClientClosed


class Deliveries(ABC):
    @abstractmethod
    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds."""

    async def messages(self, idle_timeout: float | None = None) -> AsyncIterator[Message]:
        """Deliveries until none arrives for ``idle_timeout`` seconds."""
        while (message := await self.receive(idle_timeout)) is not None:
            yield message

    def __aiter__(self) -> Self:
        """Every delivery as it comes, until the consumer is closed."""
        return self

    async def __anext__(self) -> Message:
        try:
            message = await self.receive()
        except ClientClosed:
            raise StopAsyncIteration from None
        assert message is not None  # without a timeout, receive waits for one
        return message
