"""A GM's requests to its LMs, with a bounded number in flight per LM.

Megha's GMs batch their launches per LM: while one batch to an LM is outstanding, new
placements for that LM join the next batch. Without the bound a busy GM sends one request per
scheduling pass to each LM; requests pile up in the HTTP client's pool, answers come back
late, late answers time out and are retried, and the GM spends its time on the pile instead
of on scheduling (a congestion collapse seen in the testbed after a burst). With it, the number
of requests per LM stays at `window` whatever the load, and a batch grows instead.

A request moves through three places: *open* (a launch or repartition batch not sent yet, which
later placements for the same LM and kind join), *queued* (waiting its turn; a preemption is a
request of its own and is queued closed), and *in flight* (sent, until its answer or its
failure). `ready()` says which requests may leave now, in the order they were made.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from common.errors import InvariantViolated
from common.messages import RequestKind


@dataclass(slots=True)
class LMRequest:
    request_id: str
    lm: str
    kind: RequestKind
    preempt: bool = False  # a preemption: one placement and its victims
    attempts: list[str] = field(default_factory=list)
    sent: bool = False


class RequestWindow:
    """The requests of one GM, by id; at most `window` of them in flight to any one LM."""

    def __init__(self, gm: str, epoch: int, window: int = 1) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.gm = gm
        self.epoch = epoch
        self.window = window
        self.requests: dict[str, LMRequest] = {}
        self._open: dict[tuple[str, RequestKind], LMRequest] = {}
        self._queued: dict[str, deque[LMRequest]] = {}
        self._queued_count = 0
        self.in_flight: Counter[str] = Counter()
        # The LMs with a request queued and room in their window, each by its place in
        # `_queued`: `ready` visits only these, in `_queued`'s order. Under saturation most
        # LMs have a request queued behind a full window, and visiting all of them on every
        # send was 1% of the long saturated run (benchmarks/bench_sim.py, saturated_long).
        self._sendable: dict[str, int] = {}
        self._rank: dict[str, int] = {}
        self._seq = 0

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.requests

    def get(self, request_id: str) -> LMRequest | None:
        return self.requests.get(request_id)

    # -- making requests --------------------------------------------------------------------

    def batch_for(self, lm: str, kind: RequestKind) -> LMRequest:
        """The open batch for this LM and kind, made if there is none."""
        request = self._open.get((lm, kind))
        if request is None:
            request = self._open[(lm, kind)] = self._new(lm, kind, preempt=False)
        return request

    def single(self, lm: str, kind: RequestKind) -> LMRequest:
        """A request of its own (a preemption), queued behind those made before it."""
        return self._new(lm, kind, preempt=True)

    def _new(self, lm: str, kind: RequestKind, preempt: bool) -> LMRequest:
        self._seq += 1
        request = LMRequest(f"{self.gm}.{self.epoch}.{self._seq}", lm, kind, preempt)
        self.requests[request.request_id] = request
        queue = self._queued.get(lm)
        if queue is None:  # (not `setdefault`, which would make a deque per request)
            queue = self._queued[lm] = deque()
            self._rank[lm] = len(self._rank)
        queue.append(request)
        self._queued_count += 1
        if self.in_flight[lm] < self.window:
            self._sendable[lm] = self._rank[lm]
        return request

    # -- sending and settling ---------------------------------------------------------------

    def ready(self) -> Iterator[LMRequest]:
        """Requests that may be sent now, marked sent; each LM's in the order made."""
        sendable = self._sendable
        if not sendable:
            return
        # in `_queued`'s order, as a scan of every LM would find them; the caller may finish
        # a request it is handed (its task ended meanwhile), which frees room for the next
        # of the same LM only
        for lm in sorted(sendable, key=sendable.__getitem__):
            queue = self._queued[lm]
            while queue and self.in_flight[lm] < self.window:
                request = queue.popleft()
                self._queued_count -= 1
                if not request.preempt:
                    del self._open[(lm, request.kind)]
                request.sent = True
                self.in_flight[lm] += 1
                yield request
            del sendable[lm]

    def finished(self, request_id: str) -> LMRequest | None:
        """An answer or a failure of a sent request; None for one not (or no longer) known."""
        request = self.requests.get(request_id)
        if request is None or not request.sent:
            return None
        del self.requests[request_id]
        lm = request.lm
        self.in_flight[lm] -= 1
        if self._queued[lm]:
            self._sendable[lm] = self._rank[lm]
        return request

    @property
    def queued(self) -> int:
        return self._queued_count

    def validate(self, reserved: Iterable[str] = ()) -> None:
        """`reserved`: the request ids the view holds reservations for; each must be known."""
        outliving = set(reserved) - set(self.requests)
        if outliving:
            raise InvariantViolated(f"{self.gm}: reservations outlive their requests: "
                                    f"{sorted(outliving)}")
        sent = Counter(r.lm for r in self.requests.values() if r.sent)
        if +sent != +self.in_flight:
            raise InvariantViolated(f"{self.gm}: in-flight counts {dict(self.in_flight)} differ "
                                    f"from sent requests {dict(sent)}")
        for lm, count in self.in_flight.items():
            if count > self.window:
                raise InvariantViolated(f"{self.gm}: {count} requests in flight to {lm}, "
                                        f"window {self.window}")
        sendable = {lm: self._rank[lm] for lm, queue in self._queued.items()
                    if queue and self.in_flight[lm] < self.window}
        if sendable != self._sendable:
            raise InvariantViolated(f"{self.gm}: LMs with a request ready to send "
                                    f"{sorted(self._sendable)}, should be {sorted(sendable)}")
        unsent = sum(len(q) for q in self._queued.values())
        if unsent != self._queued_count or unsent != sum(
                not r.sent for r in self.requests.values()):
            raise InvariantViolated(f"{self.gm}: queued requests miscounted")
        for (lm, kind), request in self._open.items():
            if request.sent or request.preempt or (request.lm, request.kind) != (lm, kind):
                raise InvariantViolated(f"{self.gm}: open batch {request.request_id} is wrong")
