"""The performance page's tables in tests: reStructuredText that parses as the docs
build parses it, and a benchmark's JSON rendered as its table on the page."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from docutils.core import publish_doctree
from docutils.utils import Reporter

from pzq.bench.performance_run import BENCHMARKS


def parsed(text: str) -> None:
    """Fails on any reStructuredText warning, as the docs build does."""
    publish_doctree(text, settings_overrides={"halt_level": Reporter.WARNING_LEVEL,
                                              "report_level": Reporter.SEVERE_LEVEL})


def renders_as_its_page_table(name: str, figures: Path, skipped: Sequence[str] = ()) -> str:
    """The figures a benchmark wrote, as scripts/performance_run.py puts them on the
    page (the table ``name``): rendered, parsed, and returned."""
    (benchmark,) = [benchmark for benchmark in BENCHMARKS if benchmark.name == name]
    text = "\n".join(table.rst() for table in
                     benchmark.render(json.loads(figures.read_text()), skipped))
    assert ".. list-table::" in text and "   * - " in text, text[:1000]
    parsed(text)
    return text
