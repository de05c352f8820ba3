"""tomllib's syntax errors in pzq's form: ``, line N: what`` after the file's name, as
the files' other mistakes are said (the config file and the --authorization file)."""

from __future__ import annotations

import ast
import re

TOML_AT = re.compile(r"(?P<what>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)", re.S)
AT_END = re.compile(r"(?P<what>.*) \(at end of document\)", re.S)
TWICE = re.compile(r"Cannot declare (?P<key>\(.*\)) twice", re.S)
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_mistake(said: str, text: str) -> str:
    """tomllib's error ``said`` of ``text`` as ", line N: what", a table or key given
    twice and a text left open in pzq's words; where no line is given, as tomllib says."""
    at_end = AT_END.fullmatch(said)
    if at_end is not None:  # a list, table or text left open to the end of the file
        return (f", line {max(len(text.splitlines()), 1)}: {at_end['what']} "
                "(the file ends first)")
    at = TOML_AT.fullmatch(said)
    if at is None:
        return f": {said}"
    line, what = int(at["line"]), at["what"]
    twice = TWICE.fullmatch(what)
    if twice is not None:
        # as the docs write a client's table: [clients."KEY"]
        header = ".".join(part if index == 0 and BARE_KEY.fullmatch(part) else f'"{part}"'
                          for index, part in enumerate(ast.literal_eval(twice["key"])))
        return f", line {line}: [{header}] is declared twice: give each table once"
    if what == "Cannot overwrite a value":
        key, equals, _ = text.splitlines()[line - 1].partition("=")
        named = key.strip() if equals else "a key or table"
        return f", line {line}: {named} is given twice: give it once"
    if what == "Illegal character '\\n'":  # a one-line string meets the end of its line
        return f", line {line}: a text in quotes is not closed on its line"
    return f", line {line}: {what} (column {at['column']})"
