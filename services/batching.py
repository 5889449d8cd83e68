"""One peer, one request in flight: a bounded outbox whose items leave in batches.

Under load, a service that sent one request per item would have as many requests in flight as
items, and each costs both ends about a millisecond of Python: the peer falls behind, answers
time out, retries add requests, and the pair collapses. A `BatchSender` keeps at most one
request to its peer outstanding; whatever is offered meanwhile waits in order and leaves in
the next request, up to `max_batch` items. So the faster items arrive, the fuller the batches,
and the number of requests stays near one per round trip (Megha's GMs batch their launches per
LM the same way). `min_interval` paces the requests further when the round trip is short:
after a request, the next one leaves no sooner than that (an item offered to an idle sender
leaves at once), so a busy pair exchanges at most 1 / min_interval requests a second.

The outbox is bounded: `offer` refuses an item past `limit` waiting ones and counts it, and
the caller decides what a refusal means (a worker call that never leaves is reported as a
failed dispatch, a cancel is dropped and logged). `send` is the caller's: it gets a batch and
retries it as it sees fit; when it returns (or raises), the next batch goes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class BatchSender(Generic[T]):
    def __init__(self, name: str, send: Callable[[Sequence[T]], Awaitable[None]], *,
                 max_batch: int = 500, limit: int = 10_000, min_interval: float = 0.0,
                 on_error: Callable[[str, BaseException], None] | None = None) -> None:
        self.name = name
        self._send = send
        self.max_batch = max_batch
        self.limit = limit
        self.min_interval = min_interval
        self._on_error = on_error
        self._waiting: deque[T] = deque()
        self._wake = asyncio.Event()
        self.in_flight = 0  # items in the request that is out
        self.refused = 0  # items `offer` turned away because the outbox was full
        self.batches = 0
        self.items = 0

    def offer(self, item: T) -> bool:
        """Queue `item` for the next request; False (and nothing queued) if the outbox is full."""
        if len(self._waiting) >= self.limit:
            self.refused += 1
            return False
        self._waiting.append(item)
        self._wake.set()
        return True

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting) + self.in_flight

    async def run(self) -> None:
        """Send batches until cancelled; one request at a time."""
        loop = asyncio.get_running_loop()
        next_at = 0.0
        while True:
            if not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            wait = next_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # more items join this batch meanwhile
            next_at = loop.time() + self.min_interval
            count = min(len(self._waiting), self.max_batch)
            batch = [self._waiting.popleft() for _ in range(count)]
            self.in_flight = count
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a sender bug must not stop the outbox for good
                if self._on_error is not None:
                    self._on_error(self.name, error)
            finally:
                self.in_flight = 0
            self.batches += 1
            self.items += count
