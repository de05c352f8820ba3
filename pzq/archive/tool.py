"""pzq-archive: look into an archive directory without a node.

    pzq-archive topics DIR                      topics, segments, offsets and sizes
    pzq-archive dump DIR TOPIC [--from OFFSET] [--count N]
    pzq-archive verify FILE                     check a segment frame by frame
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pzq.archive.codec import valid_length
from pzq.archive.files import read_topic
from pzq.archive.topiclog import list_segments
from pzq.errors import ArchiveFormatError

EXIT_OK = 0
EXIT_BAD_SEGMENT = 1  # verify found bytes that are not whole records
EXIT_USAGE = 2


def make_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pzq-archive", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    topics = commands.add_parser("topics", help="list topics and their segments")
    topics.add_argument("directory", type=Path)
    dump = commands.add_parser("dump", help="print messages from an offset on")
    dump.add_argument("directory", type=Path)
    dump.add_argument("topic")
    dump.add_argument("--from", dest="start", type=int, default=0, help="first offset")
    dump.add_argument("--count", type=int, default=0, help="at most N messages (0: all)")
    verify = commands.add_parser("verify", help="check one segment file")
    verify.add_argument("file", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_argument_parser().parse_args(argv)
    if args.command == "topics":
        return list_topics(args.directory)
    if args.command == "dump":
        return dump(args.directory, args.topic, args.start, args.count)
    return verify(args.file)


def list_topics(directory: Path) -> int:
    if not directory.is_dir():
        print(f"pzq-archive: error: {directory} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    for topic_dir in sorted(path for path in directory.iterdir() if path.is_dir()):
        segments = list_segments(topic_dir)
        if not segments:
            continue
        end = segments[-1].start + segments[-1].size
        total = sum(segment.size for segment in segments)
        print(f"{topic_dir.name}: offsets {segments[0].start}..{end}, {len(segments)} "
              f"segment(s), {total} bytes")
        for segment in segments:
            print(f"  {segment.path.name}  start {segment.start}  size {segment.size}")
    return EXIT_OK


def dump(directory: Path, topic: str, start: int, count: int) -> int:
    for shown, (offset, message) in enumerate(read_topic(directory, topic, start), 1):
        body = b" | ".join(message.parts).decode(errors="replace")
        print(f"{offset} {message.key.decode(errors='replace')} msg_id="
              f"{message.msg_id.decode(errors='replace')} deliveries={message.deliveries} "
              f"acked_us={message.acked_us} {body}")
        if count and shown >= count:
            break
    return EXIT_OK


def verify(path: Path) -> int:
    data = path.read_bytes()
    try:
        whole = valid_length(data)
    except ArchiveFormatError as exc:
        print(f"{path}: bad: {exc}")
        return EXIT_BAD_SEGMENT
    if whole != len(data):
        print(f"{path}: bad: torn record at byte {whole} ({len(data) - whole} bytes cut short)")
        return EXIT_BAD_SEGMENT
    print(f"{path}: ok, {len(data)} bytes of whole records")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
