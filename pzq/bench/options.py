"""Command-line checks the benchmark scripts share."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive(kind: type[float] | type[int]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0, else a one-line usage error."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value
    return parse
