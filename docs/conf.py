"""Sphinx settings for pzq's documentation (built by scripts/build-docs)."""

project = "pzq"
author = "pzq's authors"
copyright = "pzq's authors"

extensions: list[str] = []
exclude_patterns = ["_build"]
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
