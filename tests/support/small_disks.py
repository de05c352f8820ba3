"""Small real filesystems to fill: a size-limited tmpfs per place (root only), for the
disk tests and for the chaos run's full disks."""

from __future__ import annotations

import subprocess
from pathlib import Path


def mount_tmpfs(place: Path, megabytes: int) -> str | None:
    """Mount a tmpfs of ``megabytes`` MB at ``place`` (made if missing); None when
    mounted, else why it could not be (no root, no mount)."""
    place.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                             str(place)], capture_output=True, text=True, check=False)
    return None if result.returncode == 0 else result.stderr.strip() or "mount failed"


def unmount_lazily(places: list[Path]) -> None:
    """Lazily: a node being killed may still hold files there."""
    for place in places:
        subprocess.run(["umount", "-l", str(place)], check=False)
