"""Sphinx settings for pzq's documentation (built by scripts/build-docs)."""

import sys
from pathlib import Path

project = "pzq"
author = "pzq's authors"
copyright = "pzq's authors"

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

# pzq_reference: the tools' options, the log events and the Spark options, from the code
extensions: list[str] = ["sphinx.ext.autodoc", "pzq_reference"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": False}
# Types of other libraries, and pzq's inner parts the API reference does not list, are
# shown by name without a link.
nitpick_ignore_regex = [
    ("py:class",
     r"(collections|collections\.abc|typing|_asyncio|asyncio|pathlib|zmq|datetime)\..*"),
    ("py:class", r"pzq\.(client\.sessions|client\.session_views|protocol)\..*"),
    ("py:class", r"pzq\.aio\.(deliveries|socket_io)\..*"),
]
# performance/: the benchmark run's tables, which performance.rst includes
exclude_patterns = ["_build", "_ext", "performance/*.rst"]
root_doc = "index"
language = "en"
highlight_language = "none"  # a plain ``::`` block is frames or output, not code
smartquotes_action = "qe"  # quotes and ellipses, but "--hard-sync" keeps its two hyphens

html_theme = "alabaster"
html_title = "pzq"
html_theme_options = {
    "description": "a persistent store-and-forward device for ZeroMQ",
    "page_width": "1240px",  # the benchmark tables are wide
    "body_max_width": "none",
    "fixed_sidebar": True,
}
html_static_path: list[str] = []
html_show_sourcelink = False
html_copy_source = False
