"""pzq-archive: look into an archive directory without a node.

    pzq-archive topics DIR                      topics, segments, byte offsets and sizes
    pzq-archive dump DIR TOPIC [--from OFFSET] [--count N]
    pzq-archive offsets DIR TOPIC               first byte offset, end of whole records, end
    pzq-archive verify FILE                     check a segment's frames and metadata
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pzq.archive.damage import DamagedRecord
from pzq.archive.format.archive_dir import archive_dir_problem
from pzq.archive.format.entry import ArchivedMessage
from pzq.archive.format.files import segment_items, topic_items, whole_end
from pzq.archive.format.index import INDEX_SUFFIX
from pzq.archive.format.raw import is_raw_topic
from pzq.archive.format.records import Damaged, RawRecord, TornTail, walk
from pzq.archive.format.segments import SUFFIX
from pzq.archive.tier.topiclog import list_segments
from pzq.errors import ExitCode
from pzq.tool_base import ToolParser, quiet_on_closed_pipe, quiet_on_interrupt, whole_number

PROG = "pzq-archive"
EXIT_OK = ExitCode.OK
EXIT_DAMAGED = ExitCode.FAILURE  # verify found damage; dump skipped damaged records
EXIT_USAGE = ExitCode.USAGE  # no such directory, file or topic; --from not a record start


class Refused(Exception):
    """A request the archive cannot answer as asked: one line, exit 2."""


def make_argument_parser() -> ToolParser:
    parser = ToolParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    topics = commands.add_parser("topics", help="list topics and their segments")
    topics.add_argument("directory", type=Path, help="the archive (a node's --archive-dir)")
    dump = commands.add_parser("dump", help=(
        "print messages from an offset on, a line each: the record's byte offset, the "
        "node's key, msg_id, deliveries, acked_us (µs since the epoch), the parts (a raw "
        "ZPER topic's: the byte offset and the frames)"))
    dump.add_argument("directory", type=Path, help="the archive (a node's --archive-dir)")
    dump.add_argument("topic", help="the topic to print")
    dump.add_argument("--from", dest="start", type=whole_number(0), default=None,
                      metavar="OFFSET",
                      help="the byte offset of a record to start at (default: the topic's "
                      "first)")
    dump.add_argument("--count", type=whole_number(0), default=0, metavar="N",
                      help="at most N messages (0: all)")
    offsets = commands.add_parser("offsets", help="a topic's first byte offset kept, the end "
                                 "of its whole records and the end of its bytes")
    offsets.add_argument("directory", type=Path, help="the archive (a node's --archive-dir)")
    offsets.add_argument("topic", help="the topic")
    verify = commands.add_parser("verify", help="check one segment file")
    verify.add_argument("file", type=Path, help="a segment file (<start offset>.dat)")
    return parser


@quiet_on_closed_pipe
@quiet_on_interrupt
def main(argv: Sequence[str] | None = None) -> int:
    args = make_argument_parser().parse_args(argv)
    try:
        if args.command == "topics":
            return list_topics(args.directory)
        if args.command == "dump":
            return dump(args.directory, args.topic, args.start, args.count)
        if args.command == "offsets":
            return topic_offsets(args.directory, args.topic)
        return verify(args.file)
    except BrokenPipeError:
        raise  # the reader stopped reading: not an error (quiet_on_closed_pipe)
    except (Refused, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def list_topics(directory: Path) -> int:
    names = topic_names(directory)
    if not names:  # said, where an empty listing looked like a command that did nothing
        print(f"{directory}: no topics (nothing archived yet)")
    for name in names:
        segments = list_segments(directory / name)
        end = segments[-1].start + segments[-1].size
        total = sum(segment.size for segment in segments)
        kind = ", raw ZPER records" if is_raw_topic(directory / name) else ""
        print(f"{name}: byte offsets {segments[0].start}..{end}, {len(segments)} "
              f"segment(s), {total} bytes{kind}")
        for segment in segments:
            print(f"  {segment.path.name}  from byte offset {segment.start}, "
                  f"{segment.size} bytes")
    return EXIT_OK


def topic_names(directory: Path) -> list[str]:
    problem = archive_dir_problem(directory)
    if problem is not None:
        raise Refused(problem)
    return sorted(path.name for path in directory.iterdir()
                  if path.is_dir() and list_segments(path))


# -- offsets ---------------------------------------------------------------------------

def topic_offsets(directory: Path, topic: str) -> int:
    """mykafka's GetOffsets without a node: the first offset kept, the end of the
    whole records (what a reader can read), the end of the bytes (with a torn tail)."""
    check_topic(directory, topic)
    first, whole, end = whole_end(directory, topic)
    # "whole", not "flushed": STATS's flushed_offset is the fsync'd end, which a file
    # alone cannot tell
    torn = f" (a torn tail of {end - whole} bytes)" if end > whole else ""
    print(f"{topic}: byte offsets in its log: first kept {first}, end of whole records "
          f"{whole}, end of bytes {end}{torn}")
    return EXIT_OK


# -- dump ------------------------------------------------------------------------------

def dump(directory: Path, topic: str, start: int | None, count: int) -> int:
    begin = first_offset(directory, topic, start)
    shown = damaged = 0
    for item in topic_items(directory, topic, begin):
        if isinstance(item, DamagedRecord):
            damaged += 1
            print(f"{PROG}: warning: {item.describe()}", file=sys.stderr)
            continue
        print(raw_line(item) if isinstance(item, RawRecord)
              else message_line(item.offset, item.message))
        shown += 1
        if count and shown >= count:
            break
    return EXIT_DAMAGED if damaged else EXIT_OK


def raw_line(record: RawRecord) -> str:
    return f"{record.offset} " + b" | ".join(record.frames).decode(errors="replace")


def message_line(offset: int, message: ArchivedMessage) -> str:
    body = b" | ".join(message.parts).decode(errors="replace")
    return (f"{offset} {message.key.decode(errors='replace')} msg_id="
            f"{message.msg_id.decode(errors='replace')} deliveries={message.deliveries} "
            f"acked_us={message.acked_us} {body}")


def first_offset(directory: Path, topic: str, start: int | None) -> int:
    """Where dump starts: ``start`` when a record starts there (or it is the end)."""
    check_topic(directory, topic)
    segments = list_segments(directory / topic)
    first, end = segments[0].start, segments[-1].start + segments[-1].size
    if start is None:
        return first
    if start < first:
        print(f"{PROG}: offsets before {first} are deleted (retention); starting at {first}",
              file=sys.stderr)
        return first
    if start > end:
        raise Refused(f"--from {start} is past the end of topic {topic} ({end})")
    if start < end:
        _check_record_start(directory, topic, start)
    return start


def check_topic(directory: Path, topic: str) -> None:
    names = topic_names(directory)
    if topic not in names:
        raise Refused(f"no topic {topic!r} in {directory}; topics: "
                      f"{', '.join(names) or 'none (nothing archived yet)'}")


def _check_record_start(directory: Path, topic: str, start: int) -> None:
    """Walked from the indexed record start before ``start`` (the segment's start
    without a whole index)."""
    segments = list_segments(directory / topic)
    number = max(n for n, s in enumerate(segments) if s.start <= start)
    for item in segment_items(topic, segments[number], number + 1 == len(segments), start,
                              is_raw_topic(directory / topic)):
        if item.offset == start:
            return
        if item.offset + item.size > start:
            raise Refused(f"--from {start} is not the start of a record: the record at "
                          f"{item.offset} runs to {item.offset + item.size}; "
                          f"give --from {item.offset} or {item.offset + item.size}")
    raise Refused(f"--from {start} is inside the torn tail of topic {topic}")


# -- verify ----------------------------------------------------------------------------

def verify(path: Path) -> int:
    if not path.is_file():
        raise Refused(f"{path} is not a file")
    if path.suffix == INDEX_SUFFIX:  # not records: walking it "found" damage
        raise Refused(f"{path} is a segment's offset index, not a segment: give "
                      f"{path.with_suffix(SUFFIX).name}")
    data = path.read_bytes()
    items = walk(data, raw=is_raw_topic(path.parent))
    problems = [item for item in items if isinstance(item, Damaged | TornTail)]
    if not problems:
        print(f"{path}: ok, {len(data)} bytes of whole records")
        return EXIT_OK
    damaged = sum(isinstance(problem, Damaged) for problem in problems)
    print(f"{path}: bad: {_problem_line(problems[0], damaged)}")
    return EXIT_DAMAGED


def _problem_line(problem: Damaged | TornTail, damaged: int) -> str:
    if isinstance(problem, TornTail):
        return f"torn record at byte {problem.offset} ({problem.size} bytes cut short)"
    return (f"{problem.reason} at byte {problem.first_bad} (in the record at byte "
            f"{problem.offset}); {damaged} damaged record(s) in the file")


if __name__ == "__main__":
    raise SystemExit(main())
