"""A --database directory that holds something else is not taken for a store.

LevelDB creates its files in any directory it is given, so a typo naming a folder
of documents would scatter a store among them. A directory is taken when it is new,
empty, a store (it has LevelDB's CURRENT), or holds only files LevelDB names itself
(a store that was being created when its node stopped), besides the lost+found of
a file system mounted there.
"""

from __future__ import annotations

import re
from pathlib import Path

from pzq.errors import StoreError

LEVELDB_NAME = re.compile(r"^(CURRENT|LOCK|LOG|LOG\.old|MANIFEST-\d+|\d+\.(log|ldb|sst|dbtmp)"
                          r"|lost|lost\+found)$")  # lost+found: a fresh file system mounted there
SHOWN = 3  # names given in the error, enough to recognise the folder


def refuse_other_content(path: Path) -> None:
    """StoreError when ``path`` is a directory with content and no store in it."""
    if not path.is_dir() or (path / "CURRENT").exists():
        return
    others = sorted(entry.name for entry in path.iterdir()
                    if not LEVELDB_NAME.match(entry.name))
    if others:
        shown = ", ".join(others[:SHOWN]) + (", ..." if len(others) > SHOWN else "")
        raise StoreError(f"--database {path} holds other files and no pzq store ({shown}): "
                         "give a new or empty directory, or the directory of a store")
