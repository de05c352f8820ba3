"""One replay of a node: its record, its area, and its delivery state while it has one."""

from __future__ import annotations

from pzq.delivery.replay_area import DONE, READING, ReplayArea, ReplayRecord
from pzq.delivery.state import DeliveryState


class Replay:
    """One replay: its record, its area, and its delivery state while it has one."""

    def __init__(self, record: ReplayRecord, area: ReplayArea,
                 state: DeliveryState | None) -> None:
        self.record = record
        self.area = area
        self.state = state
        self.undo: tuple[int, int, str, list[int]] | None = None  # a read being written
        self.broken = ""  # why its reader stopped (the archive could not be read), if it did

    @property
    def finished(self) -> bool:
        return self.record.state == DONE

    def line(self) -> str:
        record, area = self.record, self.area
        asked = " ".join(f"{name}={value}" for name, value in record.asked.items())
        if record.state == READING:
            left = max(0, record.expected - area.acked - record.dead)
            shown = f"{'~' if record.estimated else ''}{left}"
        else:
            shown = str(area.left)
        state = "delivering" if record.state != DONE and record.position >= record.end \
            else record.state
        if self.broken:
            state = f"stopped ({self.broken})"
        return (f"{record.id} topic={record.topic} group={record.group} {asked} "
                f"offsets={record.start}..{record.end} position={record.position} "
                f"read={record.written} delivered={min(record.delivered, record.written)} "
                f"acked={area.acked} dead={record.dead} left={shown} state={state}")
