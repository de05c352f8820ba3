"""A FUSE file system that keeps, on a power cut, only what was fsync'd.

Every operation passes through to a live directory; beside it the layer keeps
what a disk would still hold after losing power: each file's bytes as of its
last fsync, and each directory's entries as of its last fsync (a new file's name
survives only once its directory was fsync'd; an unlinked or renamed one comes
back until then). Unmounting is the power cut: the process then writes that
durable image to a new directory, which the next mount starts from as if it had
all been fsync'd.

    python tests/support/powerfs.py LIVE MOUNTPOINT IMAGE   # until unmounted (fusermount3 -u)
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import mfusepy

DIRECTORY = -1  # a durable entry that is a directory (its entries are its own)


class PowerFS(mfusepy.Operations):
    use_ns = True

    def __init__(self, live: Path) -> None:
        self.live = live.resolve()  # libfuse may change the working directory
        self.ids: dict[str, int] = {}  # live file path -> file id
        self.synced: dict[int, bytearray] = {}  # file id -> its bytes at its last fsync
        self.dirty: dict[int, list[tuple[int, int]]] = {}  # written since: (offset, size)
        self.entries: dict[str, dict[str, int]] = {}  # dir path -> its names at its fsync
        self.handles: dict[int, tuple[int, bool]] = {}  # fh -> (file id, appends)
        self._adopt("/")

    # -- the durable model -------------------------------------------------------

    def _adopt(self, path: str) -> None:
        """What is there at the mount is durable (the image of the last cut)."""
        names: dict[str, int] = {}
        for entry in os.scandir(self._real(path)):
            child = _join(path, entry.name)
            if entry.is_dir(follow_symlinks=False):
                names[entry.name] = DIRECTORY
                self._adopt(child)
            else:
                file_id = self._new_id(child)
                self.synced[file_id] = bytearray(Path(entry.path).read_bytes())
                names[entry.name] = file_id
        self.entries[path] = names

    def _new_id(self, path: str) -> int:
        file_id = len(self.synced)
        self.ids[path] = file_id
        self.synced[file_id] = bytearray()
        self.dirty[file_id] = []
        return file_id

    def write_image(self, image: Path) -> None:
        """The power cut: what the disk holds, as a directory tree."""
        self._write_directory("/", image)

    def _write_directory(self, path: str, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        for name, file_id in self.entries.get(path, {}).items():
            if file_id == DIRECTORY:
                self._write_directory(_join(path, name), target / name)
            else:
                (target / name).write_bytes(self.synced[file_id])

    # -- passing through ---------------------------------------------------------------

    def _real(self, path: str) -> str:
        return str(self.live) + path

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        try:
            info = os.lstat(self._real(path))
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno) from None
        fields = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns",
                  "st_mtime_ns", "st_ctime_ns")
        attrs = {name.removesuffix("_ns"): getattr(info, name) for name in fields}
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def statfs(self, path: str) -> dict[str, int]:
        info = os.statvfs(self._real(path))
        return {name: getattr(info, name) for name in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
            "f_favail", "f_flag", "f_namemax")}

    def access(self, path: str, amode: int) -> int:
        return 0 if os.access(self._real(path), amode) else -errno.EACCES

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._real(path))
        self.ids.pop(path, None)  # its bytes stay while a durable entry names it
        return 0

    def rename(self, old: str, new: str) -> int:
        if os.path.isdir(self._real(old)):
            return -errno.EXDEV  # not modelled: nothing here renames a directory
        os.rename(self._real(old), self._real(new))
        self.ids[new] = self.ids.pop(old)
        return 0

    def create(self, path: str, mode: int, flags: int) -> int:
        fh = os.open(self._real(path), flags | os.O_CREAT, mode)
        if path not in self.ids or flags & os.O_EXCL:
            self._new_id(path)
        return self._handle(path, fh, flags)

    def open(self, path: str, flags: int) -> int:
        fh = os.open(self._real(path), flags)
        if path not in self.ids:
            self._new_id(path)
        return self._handle(path, fh, flags)

    def _handle(self, path: str, fh: int, flags: int) -> int:
        self.handles[fh] = (self.ids[path], bool(flags & os.O_APPEND))
        return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        file_id, appends = self.handles[fh]
        if appends:
            offset = os.fstat(fh).st_size  # where an O_APPEND write really goes
        written = os.pwrite(fh, data, offset)
        self.dirty[file_id].append((offset, written))
        return written

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        os.truncate(self._real(path), length)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        self.handles.pop(fh, None)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        """The file's bytes as they are now become what a power cut leaves."""
        file_id = self.handles[fh][0]
        reader = os.open(f"/proc/self/fd/{fh}", os.O_RDONLY)  # fh may be write-only
        try:
            size = os.fstat(reader).st_size
            synced = self.synced[file_id]
            del synced[size:]
            synced.extend(bytes(size - len(synced)))
            for offset, length in self.dirty[file_id]:
                end = min(offset + length, size)
                if end > offset:
                    synced[offset:end] = os.pread(reader, end - offset, offset)
        finally:
            os.close(reader)
        self.dirty[file_id] = []
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        """The directory's names as they are now become what a power cut leaves."""
        names: dict[str, int] = {}
        for entry in os.scandir(self._real(path)):
            child = _join(path, entry.name)
            if entry.is_dir(follow_symlinks=False):
                names[entry.name] = DIRECTORY
            else:
                names[entry.name] = self.ids[child] if child in self.ids else self._new_id(child)
        self.entries[path] = names
        return 0


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def main(argv: list[str]) -> int:
    live, mountpoint, image = (Path(arg).resolve() for arg in argv)
    filesystem = PowerFS(live)
    mfusepy.FUSE(filesystem, str(mountpoint), foreground=True, nothreads=True)
    if image.exists():
        shutil.rmtree(image)
    filesystem.write_image(image)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


