"""What every command-line tool stands on, the archive's and the node's own included:
an argument parser whose errors are one line, showing a long value cut, and whose
options refuse a negative value themselves, whole numbers checked, a quiet end when
the reader stops reading, and a quiet exit 130 on Ctrl-C (and, for the tools that
hold messages, on SIGTERM)."""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec

from pzq.errors import ExitCode

P = ParamSpec("P")
SHOWN_CHARS = 40  # of a value an error shows, as the node's errors show one


def shown(value: str) -> str:
    """A value as an error shows it: whole when short, else its first SHOWN_CHARS
    characters and an ellipsis (a 5000-digit value is no one-line error)."""
    return value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."


LONGEST_WORD = 200  # an error shows a word (a path, an endpoint) up to this whole


def with_long_words_cut(message: str) -> str:
    """``message`` with each word (quotes aside) longer than LONGEST_WORD cut as
    ``shown`` cuts it: the value an option refuses, wherever argparse or a type check
    put it."""
    return _LONG_WORD.sub(lambda word: shown(word.group()), message)


_LONG_WORD = re.compile(rf"[^\s'\"]{{{LONGEST_WORD + 1},}}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, unless it has none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        hidden = any(default is value for value in (None, False, True, argparse.SUPPRESS)) \
            or default in ([], (), "")
        if action.option_strings and "%(default)" not in text and not hidden:
            text += " (default: %(default)s)"
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Endpoints hold hyphens: never break a line inside one.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


# What argparse takes for a value, not an option, although it starts with '-': a
# negative number, with a unit or not (-1s, -5, -.5). Python 3.11's own matcher takes
# only bare numbers, so '--ack-timeout -1s' was "expected one argument" instead of
# the option's refusal; 3.13's is this one. No pzq option looks like a number.
NEGATIVE_VALUE = re.compile(r"^-\.?\d")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit 2, and which
    hands a negative value (``--timeout -1s``) to its option's type check, as it does
    ``--timeout=-1s``, so that the option refuses it in its own words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {with_long_words_cut(message)}\n")


class ToolParser(OneLineParser):
    """The tools' parser: one-line errors, negative values refused by their option,
    defaults shown in --help."""

    def __init__(self, prog: str | None = None, description: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(prog=prog, description=description, **kwargs)


def whole_number(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` (to ``most``, when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a whole number") from None
        if value < least or (most is not None and value > most):
            wanted = f"from {least} to {most}" if most is not None else f"{least} or more"
            raise argparse.ArgumentTypeError(f"{text}: give a whole number {wanted}")
        return value

    return parse


def quiet_on_closed_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """A tool whose reader stops reading (``| head -1``) ends quietly with exit 0: the
    reader has what it wanted, and a traceback would only hide its output."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                # What is still buffered (--help's text too) goes out here, where a
                # closed pipe is caught, not in the flush at exit, which exits 120.
                sys.stdout.flush()
        except BrokenPipeError:
            # Python flushes stdout again as it exits: let that flush go nowhere.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return ExitCode.OK

    return run


def quiet_on_interrupt(main: Callable[P, int]) -> Callable[P, int]:
    """Ctrl-C ends a tool with exit 130 and no traceback: the one who pressed it knows why."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED

    return run


def sigterm_as_interrupt(main: Callable[P, int]) -> Callable[P, int]:
    """SIGTERM (a supervisor's stop, ``timeout``, ``docker stop``) ends the tool as
    Ctrl-C does, through its own KeyboardInterrupt handling: what it holds is handed
    back and said (a group's deliveries by BYE, the messages sent without an ACK
    counted), exit 130. By default it died at once, silently, its deliveries held
    until their ack deadline."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        if threading.current_thread() is not threading.main_thread():
            return main(*args, **kwargs)  # (a signal handler is the main thread's)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return main(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return run


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupted_quietly(target: Callable[..., object], *args: object) -> None:
    """A tool's worker process: ``target(*args)``, ended without a traceback by the
    Ctrl-C that reaches every process of the terminal's group (the tool says it once)."""
    try:
        target(*args)
    except KeyboardInterrupt:
        pass
