"""``pzq --help`` gives each time option's default with a unit beside its microseconds
(``5000000, that is 5s``): the microseconds alone made a reader count zeros."""

from __future__ import annotations

import re

import pytest

from pzq.durations import duration_text, duration_us
from pzq.node import main as node_main
from pzq.node.options import OPTIONS


@pytest.mark.parametrize("us, text", [(5_000_000, "5s"), (2_500_000, "2500ms"),
                                      (120_000_000, "2m"), (90_000_000, "90s"),
                                      (86_400_000_000, "1d"), (7, "7us"), (0, "0")])
def test_duration_text_is_exact_and_read_back(us, text):
    assert duration_text(us) == text
    assert duration_us(text) == us


def test_every_time_default_in_help_has_its_unit():
    shown = " ".join(node_main.make_argument_parser().format_help().split())
    timed = [option for option in OPTIONS if option.kind is duration_us and option.default]
    assert timed  # --ack-timeout among them
    for option in timed:
        said = f"(default: {option.default}, that is {duration_text(option.default)})"
        assert said in shown, option.flag
    assert "(default: 5000000, that is 5s)" in shown
    # no time option's default is left as bare microseconds (0 needs no unit)
    assert not re.search(r"with a unit: 250ms, 5s, 2m, 1h\) \(default: [1-9]\d*\)", shown)
