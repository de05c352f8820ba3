"""pzq-archive dump: unknown topics and offsets that are not a record's start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pzq.archive.tier.topiclog import list_segments
from tests.support.archive_damage import archive_tool, write_archive

pytestmark = pytest.mark.timeout(60)


def one_line_error(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 2 and ran.stdout == "" and "Traceback" not in ran.stderr, ran
    (line,) = ran.stderr.strip().splitlines()
    return line


def test_dump_of_an_unknown_topic_names_the_topics_there(tmp_path):
    write_archive(tmp_path, count=10)
    write_archive(tmp_path, count=5, topic="audit")
    assert one_line_error(archive_tool("dump", str(tmp_path), "ordres")) == (
        f"pzq-archive: error: no topic 'ordres' in {tmp_path}; topics: audit, orders")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert one_line_error(archive_tool("dump", str(empty), "orders")).endswith(
        "topics: none (nothing archived yet)")
    assert one_line_error(archive_tool("dump", str(tmp_path / "nowhere"), "orders")) == (
        f"pzq-archive: error: the archive directory {tmp_path / 'nowhere'} does not exist")
    assert one_line_error(archive_tool("verify", str(tmp_path / "no.dat"))) == (
        f"pzq-archive: error: {tmp_path / 'no.dat'} is not a file")


def test_topics_says_what_it_lists_even_when_nothing_is_archived(tmp_path):
    """An empty archive listed nothing at all, exit 0; a segment's size had no unit."""
    empty = tmp_path / "empty"
    empty.mkdir()
    listed = archive_tool("topics", str(empty))
    assert listed.returncode == 0 and listed.stdout.splitlines() == [
        f"{empty}: no topics (nothing archived yet)"]
    write_archive(tmp_path / "archive", count=2, topic="audit")
    (segment,) = list_segments(tmp_path / "archive" / "audit")
    listed = archive_tool("topics", str(tmp_path / "archive"))
    assert listed.returncode == 0 and listed.stdout.splitlines() == [
        f"audit: byte offsets 0..{segment.size}, 1 segment(s), {segment.size} bytes",
        f"  {segment.path.name}  from byte offset 0, {segment.size} bytes"]


def test_verify_of_an_offset_index_points_to_its_segment(tmp_path):
    """A segment's .idx beside its .dat was walked as records: "bad: record has no
    metadata frame at byte 0", exit 1, for an archive with no damage at all."""
    write_archive(tmp_path, count=10)
    (segment,) = list_segments(tmp_path / "orders")
    index = segment.path.with_suffix(".idx")
    index.write_bytes(bytes(16))  # as the node writes it beside the segment
    assert one_line_error(archive_tool("verify", str(index))) == (
        f"pzq-archive: error: {index} is a segment's offset index, not a segment: "
        f"give {segment.path.name}")


def test_dump_from_an_offset_inside_a_record_refuses_naming_the_records_around_it(tmp_path):
    offsets = write_archive(tmp_path, count=300, segment_size=5000)
    inside = offsets[100] + 7
    assert one_line_error(archive_tool("dump", str(tmp_path), "orders", "--from",
                                       str(inside))) == (
        f"pzq-archive: error: --from {inside} is not the start of a record: the record "
        f"at {offsets[100]} runs to {offsets[101]}; give --from {offsets[100]} or "
        f"{offsets[101]}")
    dumped = archive_tool("dump", str(tmp_path), "orders", "--from", str(offsets[100]),
                          "--count", "2")
    assert dumped.returncode == 0 and dumped.stderr == ""
    assert [int(line.split()[0]) for line in dumped.stdout.splitlines()] == offsets[100:102]
    end = sum(segment.size for segment in list_segments(tmp_path / "orders"))
    at_end = archive_tool("dump", str(tmp_path), "orders", "--from", str(end))
    assert (at_end.returncode, at_end.stdout, at_end.stderr) == (0, "", "")
    assert one_line_error(archive_tool("dump", str(tmp_path), "orders", "--from",
                                       str(end + 5))) == (
        f"pzq-archive: error: --from {end + 5} is past the end of topic orders ({end})")


def test_dump_from_an_offset_deleted_by_retention_starts_at_the_first_kept(tmp_path):
    offsets = write_archive(tmp_path, count=100, segment_size=5000)
    first, second, *_ = list_segments(tmp_path / "orders")
    first.path.unlink()  # as retention deletes a whole segment
    dumped = archive_tool("dump", str(tmp_path), "orders", "--from", "0", "--count", "1")
    assert dumped.returncode == 0
    assert dumped.stderr.strip() == (f"pzq-archive: offsets before {second.start} are "
                                     f"deleted (retention); starting at {second.start}")
    assert int(dumped.stdout.split()[0]) == second.start and second.start in offsets


@pytest.mark.parametrize("command", [("dump", "orders"), ("topics",)])
def test_a_closed_output_pipe_ends_the_tool_quietly(tmp_path, command):
    write_archive(tmp_path, count=300, segment_size=5000)
    reader, writer = os.pipe()
    os.close(reader)  # as head -1 has done once it has its line: nobody reads on
    try:
        ran = subprocess.run([sys.executable, "-m", "pzq.archive.tool", command[0],
                              str(tmp_path), *command[1:]], stdout=writer,
                             stderr=subprocess.PIPE, text=True, timeout=30, check=False)
    finally:
        os.close(writer)
    assert (ran.returncode, ran.stderr) == (0, "")


@pytest.mark.parametrize("option, value", [("--count", "-1"), ("--from", "-5"),
                                           ("--count", "many")])
def test_dump_refuses_a_count_or_offset_below_0_naming_the_option(tmp_path, option, value):
    write_archive(tmp_path, count=10)
    line = one_line_error(archive_tool("dump", str(tmp_path), "orders", option, value))
    assert line.startswith(f"pzq-archive dump: error: argument {option}: {value}")


def test_a_directory_that_is_not_an_archive_is_one_error_not_an_empty_listing(tmp_path):
    """The node's store or the archive's parent listed no topics and exited 0."""
    archive = tmp_path / "pzq-archive"
    write_archive(archive, count=3)
    store = tmp_path / "pzq-data"
    store.mkdir()
    (store / "CURRENT").write_text("MANIFEST-000001\n")
    for wrong in (store, tmp_path):
        assert one_line_error(archive_tool("topics", str(wrong))) == (
            f"pzq-archive: error: {wrong} is not a pzq archive directory: it holds no topic "
            "folder with segments (<20-digit offset>.dat) and no node's .lock; give the "
            "directory of the node's --archive-dir")
        assert "is not a pzq archive directory" in one_line_error(
            archive_tool("dump", str(wrong), "orders"))
    fresh = tmp_path / "fresh"  # a node's, before its first record
    fresh.mkdir()
    (fresh / ".lock").write_text("")
    (fresh / "zper-relay-clients.json").write_text("{}")
    ran = archive_tool("topics", str(fresh))
    assert (ran.returncode, ran.stdout, ran.stderr) == (
        0, f"{fresh}: no topics (nothing archived yet)\n", "")
