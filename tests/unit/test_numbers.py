"""Whole numbers in what a client sends: ASCII digits alone, and never more than the
caller's largest value has (pzq.protocol.numbers)."""

from __future__ import annotations

import pytest

from pzq.protocol.numbers import is_whole_number, whole_number


@pytest.mark.parametrize("text, number", [
    ("0", 0), (b"00012", 12), ("9" * 19, int("9" * 19)), ("0" * 50 + "7", 7),
    ("", None), ("²", None), ("٣", None), (b"9" * 20, None), ("9" * 5000, None),
    (" 5", None), ("-1", None), ("+1", None), ("1.5", None), ("1_000", None),
])
def test_only_ascii_digits_of_a_bounded_length_are_a_number(text, number):
    assert whole_number(text) == number


def test_a_caller_bounds_the_digits_and_can_tell_too_long_from_no_number():
    assert (whole_number("65535", 5), whole_number("123456", 5)) == (65535, None)
    assert is_whole_number("9" * 5000) and not is_whole_number("²")
