"""The monitor's REPLAY verb as words: what a request asks, checked before a replay
is made (pzq.replay.part.Replays makes it).

    REPLAY GROUP topic group from=earliest|TIME|OFFSET [to=TIME|OFFSET]
    REPLAY CANCEL id
"""

from __future__ import annotations

from dataclasses import dataclass

from pzq.protocol.topic_reads import DEFAULT_GROUP
from pzq.replay.range import Bound, parse_bound
from pzq.store.topics import Group, Topics

USAGE = ("usage: REPLAY GROUP topic group from=earliest|TIME|OFFSET [to=TIME|OFFSET], "
         "or REPLAY CANCEL id")


@dataclass(frozen=True)
class Begin:
    topic: str
    group: str
    first: Bound
    last: Bound | None
    asked: dict[str, str]  # the range's words as given, for the replay's line


@dataclass(frozen=True)
class Cancel:
    replay_id: str


def parse_request(arguments: list[bytes]) -> Begin | Cancel:
    """The REPLAY verb's arguments; ValueError naming what is wrong, with the usage."""
    words = [argument.decode(errors="replace") for argument in arguments]
    kind = words[0].upper() if words else ""
    if kind == "CANCEL" and len(words) == 2:
        return Cancel(words[1])
    names = [word for word in words[1:] if "=" not in word]
    options = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    if kind != "GROUP" or len(names) != 2 or "from" not in options:
        raise ValueError(USAGE)
    asked: dict[str, str] = {name: options[name] for name in ("from", "to") if name in options}
    first = parse_bound(options.pop("from"), "from", earliest_ok=True)
    last = parse_bound(options.pop("to"), "to", earliest_ok=False) if "to" in options else None
    if options:
        raise ValueError(f"unknown option {sorted(options)[0]!r}; {USAGE}")
    return Begin(names[0], names[1], first, last, asked)


def named_group(topics: Topics, topic_name: str, name: str) -> Group:
    """The named group a replay is for; ValueError naming what is there instead."""
    topic = topics.topics.get(topic_name)
    if topic is None:
        known = ", ".join(sorted(topics.topics)) or "none yet"
        raise ValueError(f"no topic {topic_name[:60]!r} (topics: {known})")
    if name == DEFAULT_GROUP:
        raise ValueError("default is the consumers on --send-dsn; a replay is for a "
                         "named group of --consume-dsn")
    group = topic.groups.get(name)
    if group is None:
        known = ", ".join(sorted(topic.groups)) or "none"
        raise ValueError(f"no group {name[:60]!r} in topic {topic.name} (groups: {known})")
    return group


def range_words(asked: dict[str, str]) -> str:
    """The range as it was asked for (``from=... to=...``)."""
    return " ".join(f"{name}={value}" for name, value in asked.items())
