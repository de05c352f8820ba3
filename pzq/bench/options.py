"""Command-line checks the benchmark scripts share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


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


def output_file(text: str) -> Path:
    """An argparse type: a file the figures go to, its directory there already, checked
    before a run of minutes rather than when writing its figures at the end."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory: give a file name in it")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: there is no directory {path.parent}")
    return path
