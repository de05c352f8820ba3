"""Reference pages generated from the code at build time, so they cannot drift.

* ``.. pzq-tool-options:: module:function`` lists every option (and subcommand) of a
  tool from the argument parser that function builds, as ``--help`` shows them.
* ``.. pzq-log-events::`` lists every structured log event the code writes, with its
  level and fields, found in the source (``log.info("event", field=...)``); its
  content gives each event's meaning, one ``event: meaning`` line each.
* ``.. pzq-spark-options::`` lists every option the Spark data source reads
  (``options.get("name")`` in ``pzq/spark/``); its content gives each one's meaning.

An event or option in the code without a meaning here, or a meaning for one the code
no longer has, is a build warning, which ``scripts/build-docs`` makes an error.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pzq"
LEVELS = ("debug", "info", "warning", "error", "exception", "critical")
EVENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
LOGGERS = re.compile(r"^(log|logger|_log)$")  # the names pzq binds get_logger(...) to
logger = logging.getLogger(__name__)


# -- what the code holds ---------------------------------------------------------------

@dataclass
class LogEvent:
    name: str
    levels: set[str] = field(default_factory=set)
    fields: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _is_logger(receiver: ast.expr) -> bool:
    """``log``, ``logger`` (also ``logger()``, ``self._log``) or ``get_logger(...)``."""
    if isinstance(receiver, ast.Call):
        receiver = receiver.func
    if isinstance(receiver, ast.Attribute):
        return receiver.attr == "get_logger" or bool(LOGGERS.match(receiver.attr))
    return isinstance(receiver, ast.Name) and (
        receiver.id == "get_logger" or bool(LOGGERS.match(receiver.id)))


def log_events(package: Path = PACKAGE) -> dict[str, LogEvent]:
    """Every ``<logger>.<level>("event", field=...)`` call under ``package``."""
    events: dict[str, LogEvent] = {}
    for path in sorted(package.rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in LEVELS and _is_logger(call.func.value)
                    and call.args and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                    and EVENT_NAME.match(call.args[0].value)):
                continue
            event = events.setdefault(call.args[0].value, LogEvent(call.args[0].value))
            event.levels.add("error" if call.func.attr == "exception" else call.func.attr)
            event.fields.update(keyword.arg if keyword.arg else f"**{ast.unparse(keyword.value)}"
                                for keyword in call.keywords)
            if call.func.attr == "exception":
                event.fields.add("exception")
            event.modules.add(_module_name(path))
    return events


def spark_options(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every ``options.get("name")`` of the Spark data source, and its modules."""
    found: dict[str, set[str]] = {}
    for path in sorted((package / "spark").glob("*.py")):
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "get" and isinstance(call.func.value, ast.Name)
                    and call.func.value.id == "options" and call.args
                    and isinstance(call.args[0], ast.Constant)):
                found.setdefault(str(call.args[0].value), set()).add(_module_name(path))
    return found


def meanings(lines: Iterable[str]) -> dict[str, str]:
    """``name: meaning`` lines, a line indented further continuing the one before."""
    found: dict[str, str] = {}
    last = None
    for line in lines:
        if not line.strip():
            continue
        if line[:1].isspace() and last is not None:
            found[last] += " " + line.strip()
            continue
        name, colon, meaning = line.partition(":")
        if not colon:
            raise ValueError(f"not 'name: meaning': {line!r}")
        last = name.strip()
        found[last] = meaning.strip()
    return found


def unmatched(code: Iterable[str], documented: Iterable[str]) -> tuple[list[str], list[str]]:
    """(in the code without a meaning, with a meaning but not in the code)."""
    code, documented = set(code), set(documented)
    return sorted(code - documented), sorted(documented - code)


# -- rendering ---------------------------------------------------------------------------

def _literal(text: str) -> str:
    return f"``{text}``" if text else ""


def _list_table(header: list[str], rows: Iterable[list[str]], widths: str) -> Iterator[str]:
    yield ".. list-table::"
    yield "   :header-rows: 1"
    yield f"   :widths: {widths}"
    yield ""
    for row in [header, *rows]:
        for number, cell in enumerate(row):
            lines = cell.splitlines() or [""]
            yield f"   {'*' if number == 0 else ' '} - {lines[0]}"
            yield from (f"       {line}" for line in lines[1:])
    yield ""


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as ``--help`` prints it (defaults filled in), one line."""
    formatter = parser._get_formatter()
    text = formatter._expand_help(action) if action.help else ""
    return " ".join(text.split())


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return _literal(action.metavar or action.dest)  # type: ignore[arg-type]
    metavar = ""
    if action.nargs != 0:
        metavar = " " + (action.metavar if isinstance(action.metavar, str)
                         else action.dest.upper())
        if action.choices and not action.metavar:
            metavar = " {" + ",".join(map(str, action.choices)) + "}"
    return ", ".join(_literal(flag + metavar) for flag in action.option_strings)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`").replace("|", "\\|")


def _options_rows(parser: argparse.ArgumentParser, skip: set[str]) -> Iterator[list[str]]:
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if set(action.option_strings) & skip:
            continue
        what = _help(parser, action)
        if action.choices and not action.option_strings:
            what = f"one of {', '.join(map(str, action.choices))}" + (f"; {what}" if what else "")
        yield [_flags(action), _escape(what)]


def tool_lines(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield "::"
    yield ""
    yield from ("   " + line for line in parser.format_usage().strip().splitlines())
    yield ""
    if parser.description:
        yield _escape(" ".join(parser.description.split("\n\n")[0].split()))
        yield ""
    rows = list(_options_rows(parser, set()))
    if rows:
        yield from _list_table(["option", "what it does"], rows, "35 65")
    subparsers = [action for action in parser._actions
                  if isinstance(action, argparse._SubParsersAction)]
    own = {flag for action in parser._actions for flag in action.option_strings}
    for group in subparsers:
        helps = {choice.dest: choice.help for choice in group._choices_actions}
        for name, command in group.choices.items():
            yield f".. rubric:: {parser.prog} {name}"
            yield ""
            if helps.get(name):
                yield _escape(" ".join(str(helps[name]).split())) + "."
                yield ""
            rows = list(_options_rows(command, own - {"-h", "--help"}))
            if rows:
                yield from _list_table(["argument", "what it does"], rows, "35 65")
    if subparsers and any(flag in own for flag in ("--dsn", "--timeout")):
        yield (f"The options of ``{parser.prog}`` itself may also follow the command "
               "(given there, they win).")
        yield ""


class ToolOptions(SphinxDirective):
    required_arguments = 1  # module:function building the parser

    def run(self) -> list[nodes.Node]:
        module, _, function = self.arguments[0].partition(":")
        parser = getattr(importlib.import_module(module), function)()
        return self._parse(list(tool_lines(parser)))

    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(lines, self.get_source_info()[0]),
                                self.content_offset, container)
        return container.children


class CheckedTable(ToolOptions):
    """A table of what the code holds, each with the meaning the directive's content gives."""

    has_content = True
    required_arguments = 0
    what = ""

    def found(self) -> dict[str, list[str]]:
        raise NotImplementedError

    def header(self) -> tuple[list[str], str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        found, given = self.found(), meanings(self.content)
        missing, gone = unmatched(found, given)
        location = self.get_location()
        for name in missing:
            logger.warning(f"{self.what} {name} is in the code but has no meaning here",
                           location=location)
        for name in gone:
            logger.warning(f"{self.what} {name} has a meaning here but is not in the code",
                           location=location)
        header, widths = self.header()
        rows = [[_literal(name), *cells, _escape(given.get(name, ""))]
                for name, cells in sorted(found.items())]
        return self._parse(list(_list_table(header, rows, widths)))


class LogEvents(CheckedTable):
    what = "log event"

    def found(self) -> dict[str, list[str]]:
        return {event.name: [", ".join(sorted(event.levels)),
                             ", ".join(_literal(name) for name in sorted(event.fields)),
                             ", ".join(sorted(event.modules))]
                for event in log_events().values()}

    def header(self) -> tuple[list[str], str]:
        return ["event", "level", "fields", "written by", "meaning"], "20 8 24 18 30"


class SparkOptions(CheckedTable):
    what = "Spark option"

    def found(self) -> dict[str, list[str]]:
        return {name: [", ".join(sorted(modules))] for name, modules in spark_options().items()}

    def header(self) -> tuple[list[str], str]:
        return ["option", "read by", "meaning"], "22 20 58"


def init_signature(app: Sphinx, what: str, name: str, obj: Any, options: Any,
                   signature: str | None, annotation: str | None) -> tuple[str, str] | None:
    """A class whose ``__new__`` takes anything (to hand out a subclass) is shown with
    its ``__init__``'s parameters, which are what a caller gives."""
    if what != "class" or signature is None or not signature.startswith("(*args"):
        return None
    from sphinx.util.inspect import signature as inspect_signature
    from sphinx.util.inspect import stringify_signature

    found = inspect_signature(obj.__init__, bound_method=True)
    return stringify_signature(found, show_return_annotation=False), annotation or ""


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-signature", init_signature)
    app.add_directive("pzq-tool-options", ToolOptions)
    app.add_directive("pzq-log-events", LogEvents)
    app.add_directive("pzq-spark-options", SparkOptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
