"""The store's format version: written when a store is made, checked at every start.

The version counts changes of the key layout (pzq.store.keyspace) and of the stored
values that an earlier release of pzq could not read. It is kept as ASCII digits
under ``M format``. A store made before the version was kept has no such key: its
format is 1, the format of every store so far, and the node writes the key and
goes on (the upgrade in place from the releases before versions). A store of a
newer format than this release reads is refused at start, naming both versions,
before anything is written to it. The release that first writes format 2 will
bring a store of format 1 up to it at start, and this module is where it says how.
"""

from __future__ import annotations

from pathlib import Path

from pzq.errors import StoreError

STORE_FORMAT = 1  # what this release writes and reads
UNVERSIONED = 1  # the format of a store without the key (made before versions were kept)


def format_of(found: bytes | None) -> int:
    """The format a stored version says (UNVERSIONED without one); ValueError for a
    value that is not a version."""
    if found is None:
        return UNVERSIONED
    text = found.decode(errors="replace")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"its format version {text[:20]!r} is not a whole number from 1")
    return int(text)


def encode_format(version: int = STORE_FORMAT) -> bytes:
    return str(version).encode()


def refuse_newer(path: Path, version: int) -> None:
    """StoreError when the store at ``path`` has a format this release cannot read."""
    if version > STORE_FORMAT:
        raise StoreError(
            f"the store {path} has format {version}, newer than this pzq reads "
            f"(format {STORE_FORMAT}): run a release that reads format {version}, or "
            f"start this one on a backup taken before the upgrade")
