"""The monitor's verbs that take no words: a word after one is refused with its usage
(``STATS extra`` is a typo or a verb the node does not have, not STATS)."""

from __future__ import annotations

from pzq.clock import Now
from pzq.parts import Verb


def shown_words(arguments: list[bytes]) -> str:
    """A verb's words as an ERROR shows them: at most 40 characters."""
    return b" ".join(arguments).decode(errors="replace")[:40]


def alone(name: str, verb: Verb) -> Verb:
    """``verb``, answering ERROR with its usage when given any word."""
    def answer(arguments: list[bytes], now: Now) -> bytes:
        if arguments:
            return (f"ERROR: {name} {shown_words(arguments)}: give {name} alone, no words "
                    "after it").encode()
        return verb(arguments, now)
    return answer
