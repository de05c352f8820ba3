"""What every part of a node offers the loop, so the loop holds a list of parts and
asks each in turn; a part that is off is not in the list (pzq.node.registry opens the
list from the options).

A part owns its sockets from its opening to ``close``. It names the socket it bound
(``bound``; node_ready names it by the part's declaration, pzq.endpoints), what the
loop polls for it at all times (``polled``) and the periodic wake-ups it needs
(``ticks``). A wake asks, in this order: what to poll (``interest``) and how long at
most (``timeout_ms``: of a part that ``tells_wait``, only when it said its wait may
have shortened or its last deadline came, pzq.agenda); the timer's reasons
(``on_ticks``); what waits on its sockets, into the wake's one store batch
(``take``); what the takes leave owed, into the same batch (``finish``); in a wake
whose batch holds nothing from the other parts (no message stored, no copy: nothing
a send waits for), what may go before the write (``send_early``: a drain's next
deliveries); what a take left for after those sends (``settle``: an ACK's deletes
and marks, which no delivery pass needs; before any later part takes or finishes,
so that those see the tables as they always did); the batch is written (or
``write_failed`` says why not); after the write, what it sends (``send_out``); last,
what it answers (``answer``).
``figures`` adds its section to STATS and ``verbs`` its commands to the monitor's.
At a stop, ``owes`` keeps the loop turning a little, and ``hand_back`` sends what is
owed. Each method does nothing unless a part has something to do then, and a part
that has nothing for a step for a while says so and is not asked there (the agenda's
``rest`` and ``ask``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import zmq

from pzq.agenda import Agenda
from pzq.clock import Now
from pzq.hooks import overriding
from pzq.store.batch import Batch
from pzq.zmqio import Events, Socket

# The reasons of the periodic wake-ups (pzq.node.scheduler), given to ``on_ticks``:
REAP = b"R"  # collect expired deliveries
HEARTBEAT = b"H"  # ping the cluster's peers
RETENTION = b"T"  # delete archive segments past --retain-hours
RELAY_POLL = b"P"  # push new archive records to ZPER relay clients

Figures = dict[str, object]
Verb = Callable[[list[bytes], Now], bytes]  # a monitor command: arguments, time -> reply


class Part:
    # True: the part says when its wait may have shortened (``join``'s agenda), and is
    # asked ``timeout_ms`` only then and when its last deadline comes
    tells_wait = False

    def join(self, agenda: Agenda) -> None:
        """The loop's agenda, once, when the part is added (a part that tells its wait
        keeps it, and wires what changes its wait to it)."""

    def bound(self) -> list[Socket]:
        """The socket of the endpoint this part bound (node_ready's, by its declaration)."""
        return []

    def polled(self) -> list[Socket | int]:
        """What the loop polls for input at every wake (the rest: ``interest``)."""
        return []

    def ticks(self) -> dict[bytes, int]:
        """The periodic wake-ups this part needs: reason -> period in µs."""
        return {}

    def start(self, now: Now) -> None:
        """Once, before the first wake."""

    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        """Register what to poll (``delivering``: the node is not stopping)."""

    def timeout_ms(self, now: Now) -> int | None:
        """Wake at the latest after this long (None: only on events)."""
        return None

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        """The reasons of the ticks due in this wake (pzq.node.scheduler), and the
        waker's (pzq.node.waker: a signal's byte)."""

    def take(self, events: Events, batch: Batch, now: Now) -> None:
        """What waits, into the wake's batch."""

    def finish(self, batch: Batch, now: Now) -> None:
        """After every part took: what the takes leave owed, into the same batch."""

    def send_early(self, events: Events, now: Now, delivering: bool) -> None:
        """Before the write, in a wake whose batch holds nothing but what this part and
        the other parts that send early put in it (or earlier wakes left to write):
        what needs no durable write first. Its ``send_out`` follows after the write."""

    def settle(self, events: Events, batch: Batch, now: Now) -> None:
        """The rest of what this part's ``take`` began, into the same batch: after the
        early sends, or, in a wake that asks a later part to take or finish, before
        that part. Asked only of a part that was asked to take this wake."""

    def write_failed(self, reason: str) -> None:
        """The wake's batch was not written (``reason``: the store's words)."""

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        """After the batch is written."""

    def answer(self, events: Events, now: Now) -> None:
        """Questions and figures, last in a wake."""

    def backlogged(self) -> bool:
        """Consumers are connected and stored messages wait for them (the producers'
        intake then paces itself: pzq.node.intake_part)."""
        return False

    def acked(self) -> int:
        """Messages this part's consumers ACKed so far (the producers' intake keeps
        within a bound of those of all parts: pzq.node.intake_part)."""
        return 0

    def figures(self, now: Now) -> Figures:
        """This part's section of STATS (where it goes: its declaration's ``stats``)."""
        return {}

    def verbs(self) -> dict[bytes, Verb]:
        """The monitor commands this part answers."""
        return {}

    def owes(self) -> bool:
        """At a stop: something is owed that is worth a short wait (producer ACKs
        waiting for copies)."""
        return False

    def hand_back(self, seconds: float) -> Figures:
        """At a stop, after the last wake: send what is owed, within ``seconds``; what
        could not be, for the node's last log line."""
        return {}

    def close(self) -> None:
        """Close the part's sockets (the loop has stopped)."""


# the steps a part may rest from while it has nothing for them (Agenda.rest)
ROLLED = ("interest", "take", "finish", "send_out", "answer")
ALWAYS = -1  # (no descriptor: a part asked at every wake)


class Parts:
    """The node's parts in the loop's order, asked together. Each is added with its
    declaration's role (the name node_ready gives its socket) and STATS section."""

    def __init__(self) -> None:
        self._parts: list[Part] = []
        self.agenda = Agenda()  # the waits of the parts that tell them, and their rests
        self.agenda.on_roll = self._roll
        self._declared: list[tuple[Part, str, tuple[str, ...]]] = []
        # for each step of a wake, the parts that do something then (a wake asks no
        # part whose method is Part's, which does nothing)
        self._interest: list[tuple[Part, int]] = []
        self._timeout: list[Part] = []
        self._on_ticks: list[Part] = []
        self._take: list[tuple[Part, int]] = []
        self._finish: list[tuple[Part, int]] = []
        self._send_out: list[tuple[Part, int]] = []
        self._answer: list[tuple[Part, int]] = []
        self._backlogged: list[Part] = []
        self._acked: list[Part] = []
        self._send_early: list[Part] = []  # those whose writes need not precede it
        self._settling: list[Part] = []  # those whose take may leave some to ``settle``
        self.unsettled: list[Part] = []  # ... that took this wake (the loop asks ``settle``)
        # ``timeout_ms``, by the fewest calls (set as parts are added)
        self.wait_ms: Callable[[Now], int | None] = self.timeout_ms
        # for each step the agenda rolls, the parts whose method does something (set as
        # parts are added: a roll, at each rest and ask, asks no part's class again)
        self._doing: dict[str, list[Part]] = {}

    def add(self, part: Part, role: str = "", section: tuple[str, ...] = ()) -> None:
        self._parts.append(part)
        self._declared.append((part, role, section))
        part.join(self.agenda)
        if part.tells_wait:
            self.agenda.keep(part)
        self._timeout = [part for part in overriding(self._parts, Part, "timeout_ms")
                         if not part.tells_wait]
        # (the agenda's own when every part with a wait tells it: no loop, one call less)
        self.wait_ms = self.timeout_ms if self._timeout else self.agenda.timeout_ms
        self._on_ticks = overriding(self._parts, Part, "on_ticks")
        self._backlogged = overriding(self._parts, Part, "backlogged")
        self._acked = overriding(self._parts, Part, "acked")
        self._send_early = overriding(self._parts, Part, "send_early")
        self._settling = overriding(self._parts, Part, "settle")
        for step in ROLLED:
            self._doing[step] = overriding(self._parts, Part, step)
            self._roll(step)

    def _roll(self, step: str) -> None:
        """The parts a wake asks at ``step``: those whose method does something, each
        with the descriptor whose input alone asks it while it rests (pzq.agenda: -1,
        always asked); a part resting without one is left out."""
        agenda, asked = self.agenda, []
        for part in self._doing.get(step, ()):  # (none before the first add)
            if not agenda.resting(part, step):
                asked.append((part, ALWAYS))
            elif (fd := agenda.woken_by(part, step)) is not None:
                asked.append((part, fd))
        setattr(self, "_" + step, asked)

    def __iter__(self) -> Iterator[Part]:
        return iter(self._parts)

    def bound(self) -> dict[str, Socket]:
        return {role: socket for part, role, _ in self._declared for socket in part.bound()}

    def polled(self) -> list[Socket | int]:
        return [polled for part in self._parts for polled in part.polled()]

    def ticks(self) -> dict[bytes, int]:
        return {reason: period for part in self._parts
                for reason, period in part.ticks().items()}

    def start(self, now: Now) -> None:
        for part in self._parts:
            part.start(now)

    def interest(self, poller: zmq.Poller, now: Now, delivering: bool) -> None:
        for part, fd in self._interest:
            if fd == ALWAYS:  # (before the poll: no input asks a resting part yet)
                part.interest(poller, now, delivering)

    def timeout_ms(self, now: Now) -> int | None:
        soonest = self.agenda.timeout_ms(now)
        for part in self._timeout:
            wait = part.timeout_ms(now)
            if wait is not None and (soonest is None or wait < soonest):
                soonest = wait
        return soonest

    def on_ticks(self, reasons: bytes, now: Now) -> None:
        for part in self._on_ticks:
            part.on_ticks(reasons, now)

    def take(self, events: Events, batch: Batch, now: Now) -> bool:
        """True: no part but those that send early put anything in the batch (a
        part's writes counted by the batch's operations before and after it). A part
        that took and may have left some to settle has it settled before a later
        part takes or finishes; else ``settle`` does, after the early sends."""
        early, quiet, settling = self._send_early, True, self._settling
        unsettled = self.unsettled
        for part, fd in self._take:
            if fd == ALWAYS or fd in events:
                if unsettled:
                    self.settle(events, batch, now)
                before = batch.operations
                part.take(events, batch, now)
                if batch.operations != before and part not in early:
                    quiet = False
                if settling and part in settling:
                    unsettled.append(part)
        for part, fd in self._finish:
            if fd == ALWAYS or fd in events:
                if unsettled:
                    self.settle(events, batch, now)
                before = batch.operations
                part.finish(batch, now)
                if batch.operations != before and part not in early:
                    quiet = False
        return quiet

    def settle(self, events: Events, batch: Batch, now: Now) -> None:
        """What the parts that took left to settle, into the batch (before its write)."""
        unsettled = self.unsettled
        if unsettled:
            for part in unsettled:
                part.settle(events, batch, now)
            unsettled.clear()

    def send_early(self, events: Events, now: Now, delivering: bool) -> None:
        for part in self._send_early:
            part.send_early(events, now, delivering)

    def write_failed(self, reason: str) -> None:
        for part in self._parts:
            part.write_failed(reason)

    def send_out(self, events: Events, now: Now, delivering: bool) -> None:
        for part, fd in self._send_out:
            if fd == ALWAYS or fd in events:
                part.send_out(events, now, delivering)

    def answer(self, events: Events, now: Now) -> None:
        for part, fd in self._answer:
            if fd == ALWAYS or fd in events:
                part.answer(events, now)

    def backlogged(self) -> bool:
        return any(part.backlogged() for part in self._backlogged)

    def acked(self) -> int:
        return sum(part.acked() for part in self._acked)

    def figures(self, now: Now) -> Figures:
        """STATS: each part's figures in its section; a section two parts share (ZPER's
        ``zper``) holds the keys of both."""
        figures: Figures = {}
        for part, _, section in self._declared:
            place(figures, section, part.figures(now))
        return figures

    def verbs(self) -> dict[bytes, Verb]:
        return {verb: answer for part in self._parts for verb, answer in part.verbs().items()}

    def owes(self) -> bool:
        return any(part.owes() for part in self._parts)

    def hand_back(self, seconds: float) -> Figures:
        left: Figures = {}
        for part in self._parts:
            left.update(part.hand_back(seconds))
        return left

    def close(self) -> None:
        for part in self._parts:
            part.close()


def place(into: Figures, section: tuple[str, ...], figures: Figures) -> None:
    """A part's figures into STATS at ``section`` (at the top for ``()``), beside what
    another part put there."""
    if not figures:
        return
    for key in section:
        inner = into.setdefault(key, {})
        assert isinstance(inner, dict)
        into = inner
    into.update(figures)
