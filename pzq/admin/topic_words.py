"""The words of a topic or group command on the monitor socket (pzq.admin.topic_admin):
``TOPIC|GROUP``, names and ``name=value`` options, each value checked before anything is
made or changed; and a topic's limits as its lines show them."""

from __future__ import annotations

from pzq.cluster.placement import MOST_PARTITIONS
from pzq.durations import CENTURY, CENTURY_US, duration_us
from pzq.protocol.numbers import is_whole_number, whole_number
from pzq.store.topic_model import MOST_BACKOFF_STEPS, ON_EXPIRE, ON_EXPIRE_DEAD
from pzq.store.topics import Topic


def same_filter(topic: Topic, name: str, given: str | None) -> None:
    """A declare of a group that exists, naming another filter than the group's, is
    refused rather than answered "exists already" with the filter ignored."""
    group = topic.groups.get(name)
    if group is not None and given is not None and given != group.filter:
        held = f"the filter {group.filter}" if group.filter else "no filter"
        raise ValueError(f"group {name} of topic {topic.name} exists with {held}, "
                         f"not {given}; remove the group to declare it anew")


def start_not_applied(start: str | int | None) -> str:
    """Said after the answer to a declare of a group that exists, when it gave a
    ``start``: not ignored in silence (a group's start is fixed when it is made; a
    rewind is a seek)."""
    if start is None:
        return ""
    return (f" (start={start} is not applied: a group's start is fixed when it is made; "
            "SEEK GROUP moves it)")


def parse_words(arguments: list[bytes], verb: bytes) -> tuple[str, list[str], dict[str, str]]:
    """(TOPIC or GROUP, names, name=value options)."""
    words = [argument.decode(errors="replace") for argument in arguments]
    if not words or words[0].upper() not in ("TOPIC", "GROUP"):
        raise ValueError(f"{verb.decode()} TOPIC ... or {verb.decode()} GROUP ...")
    names = [word for word in words[1:] if "=" not in word]
    options: dict[str, str] = {}
    for word in words[1:]:
        if "=" in word:
            name, value = word.split("=", 1)
            if name in options:  # not the last one silently: which was meant?
                raise ValueError(f"{name} given twice ({name}={options[name][:20]}, "
                                 f"{name}={value[:20]})")
            options[name] = value
    return words[0].upper(), names, options


def count_names(names: list[str], wanted: int, usage: str) -> None:
    if len(names) != wanted:
        raise ValueError(f"usage: {usage}")


def no_more(options: dict[str, str]) -> None:
    if options:
        raise ValueError(f"unknown option {sorted(options)[0]!r}")


def number(value: int | str, name: str) -> int:
    if isinstance(value, int):
        return value
    found = whole_number(value)
    if found is None:
        raise ValueError(f"{name}={value[:20]} is not a whole number 0 or more"
                         + (" (at most 19 digits)" if is_whole_number(value) else ""))
    return found


def topic_settings_given(options: dict[str, str]) -> dict[str, object]:
    """A topic's own settings among DECLARE TOPIC's options (taken out), as Topic fields:
    its limits, its DEDUP-ID window, its messages' age and what expiry makes of them."""
    found: dict[str, object] = {}
    for name in ("max_messages", "max_bytes"):
        if name in options:
            found[name] = number(options.pop(name), name)
    if "dedup_window" in options:
        found["dedup_window_us"] = _duration(options.pop("dedup_window"))
    if "max_age" in options:  # 0 takes it away
        given = options.pop("max_age")
        found["max_age_us"] = 0 if given == "0" else _duration(given, "max_age")
    if "priorities" in options:
        given = options.pop("priorities").lower()
        if given not in ("on", "off"):
            raise ValueError("priorities must be on or off")
        found["priorities"] = given == "on"
    if "on_expire" in options:
        found["on_expire"] = options.pop("on_expire").lower()
        if found["on_expire"] not in ON_EXPIRE:
            raise ValueError(f"on_expire must be one of {', '.join(ON_EXPIRE)}")
    return found


def group_settings_given(options: dict[str, str]) -> dict[str, object]:
    """A group's own delivery settings among DECLARE GROUP's options (taken out)."""
    found: dict[str, object] = {}
    if "ack_timeout" in options:
        found["ack_timeout_us"] = _duration(options.pop("ack_timeout"), "ack_timeout")
    if "max_deliveries" in options:
        found["max_deliveries"] = number(options.pop("max_deliveries"), "max_deliveries")
    if "backoff" in options:
        steps = options.pop("backoff").split(",")
        if not 0 < len(steps) <= MOST_BACKOFF_STEPS or "" in steps:  # 1s,,10s: a step lost?
            raise ValueError(f"backoff takes 1 to {MOST_BACKOFF_STEPS} durations, "
                             "separated by ',' (e.g. 1s,10s,1m)")
        found["backoff_us"] = tuple(_duration(step, "backoff") for step in steps)
    return found


def _duration(text: str, name: str = "dedup_window") -> int:
    """A duration setting (``10m``), above 0 and at most a century, as the node's own
    time options (a group's ack_timeout of 1e29 s was taken, a float's digits)."""
    found = duration_us(text)
    if found <= 0:
        raise ValueError(f"{name} {text[:20]!r} must be above 0")
    if found > CENTURY_US:
        raise ValueError(f"{name} {text[:20]!r} must be at most {CENTURY}")
    return found


def partitions_given(given: str | None) -> int | None:
    if given is None:
        return None
    if not given.isdigit() or not 1 <= int(given) <= MOST_PARTITIONS:
        raise ValueError(f"partitions={given[:20]}: partitions must be a whole number "
                         f"from 1 to {MOST_PARTITIONS}")
    partitions = int(given)
    return partitions


def limits_text(topic: Topic) -> str:
    settings = (("max_messages", topic.max_messages), ("max_bytes", topic.max_bytes),
                ("dedup_window_us", topic.dedup_window_us), ("partitions", topic.partitions),
                ("max_age_us", topic.max_age_us),
                ("on_expire", "" if topic.on_expire == ON_EXPIRE_DEAD else topic.on_expire),
                ("priorities", "on" if topic.priorities else ""))
    return "".join(f" {name}={value}" for name, value in settings if value)
