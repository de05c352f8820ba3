"""Which archive directories a Spark read covers, and a stream's offsets per directory,
planned on the driver without a Spark session."""

from __future__ import annotations

import json

import pytest

from pzq.archive.format.segments import list_segments
from pzq.archive.tier.archive import Archive
from pzq.spark.archives import archive_dirs
from pzq.spark.source import ZperReader
from pzq.spark.stream import ArchiveDataLossError, stream_reader
from tests.support.archive_damage import message

pytestmark = pytest.mark.timeout(60)


def nodes(tmp_path, *names: str):
    for name in names:
        (tmp_path / name / "archive").mkdir(parents=True)
    return [tmp_path / name / "archive" for name in names]


def test_path_paths_and_load_list_give_the_same_directories(tmp_path):
    a, b, c = nodes(tmp_path, "a", "b", "c")
    as_list = archive_dirs({"paths": json.dumps([str(a), str(b)])})  # .load([a, b])
    assert [archive.directory for archive in as_list] == [a, b]
    assert archive_dirs({"path": f"{a}, {b}"}) == as_list
    assert archive_dirs({"paths": f"{a},{b}"}) == as_list
    both = archive_dirs({"path": str(a), "paths": f"{b},{c},{a}"})  # a given twice
    assert [archive.directory for archive in both] == [a, b, c]


def test_a_node_is_named_by_the_path_parts_that_tell_it_apart(tmp_path):
    a, b = nodes(tmp_path, "a", "b")
    (tmp_path / "orders").mkdir()
    named = archive_dirs({"path": f"{a},{b},{tmp_path / 'orders'}"})
    assert [archive.node for archive in named] == ["a/archive", "b/archive", "orders"]
    assert archive_dirs({"path": str(a)})[0].node == "archive"


def test_a_missing_directory_is_named_in_one_error(tmp_path):
    (a,) = nodes(tmp_path, "a")
    missing = tmp_path / "b" / "archive"
    with pytest.raises(ValueError, match=f"^the archive directory {missing} does not exist$"):
        archive_dirs({"paths": json.dumps([str(a), str(missing)])})
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="file is not a directory"):
        archive_dirs({"path": f"{a},{tmp_path / 'file'}"})
    with pytest.raises(ValueError, match="give the archive directory"):
        archive_dirs({})


def write(directory, first: int, count: int) -> None:
    archive = Archive(directory, segment_size=3000)
    archive.open(now=0)
    for n in range(first, first + count):
        archive.append(message(n), now=0)
    archive.close(now=0)


def test_a_stream_keeps_offsets_per_directory(tmp_path):
    a, b = nodes(tmp_path, "a", "b")
    write(a, 0, 10)
    reader = stream_reader({"path": f"{a},{b}", "topics": "orders"}, ZperReader)
    start = reader.initialOffset()
    assert start == {str(a): {"orders": 0}, str(b): {"orders": 0}}
    end = reader.latestOffset(start)
    assert end[str(b)] == {"orders": 0} and end[str(a)]["orders"] > 0
    planned = reader.partitions(start, end)
    assert {partition.node for partition in planned} == {"a/archive"}

    write(b, 0, 5)  # the other node's archive grows: only its records are new
    later = reader.latestOffset(end)
    assert later[str(a)] == end[str(a)] and later[str(b)]["orders"] > 0
    assert {partition.node for partition in reader.partitions(end, later)} == {"b/archive"}


def test_a_checkpoint_of_one_directory_goes_on_from_its_topic_offsets(tmp_path):
    (a,) = nodes(tmp_path, "a")
    write(a, 0, 10)
    reader = stream_reader({"path": str(a)}, ZperReader)
    end = reader.latestOffset({})
    older = end[str(a)]  # what a checkpoint written before several directories holds
    assert reader.latestOffset(older) == end
    assert reader.partitions(older, end) == []


def test_node_caps_one_directory_only(tmp_path):
    a, b = nodes(tmp_path, "a", "b")
    with pytest.raises(ValueError, match="node caps the stream of one archive directory"):
        stream_reader({"path": f"{a},{b}", "node": "tcp://127.0.0.1:1"}, ZperReader)


def test_records_retention_deleted_before_the_stream_read_them_fail_it_or_are_said(tmp_path):
    (a,) = nodes(tmp_path, "a")
    write(a, 0, 10)
    reader = stream_reader({"path": str(a), "topics": "orders"}, ZperReader)
    read_to = reader.latestOffset(reader.initialOffset())
    write(a, 10, 40)
    later = reader.latestOffset(read_to)
    segments = list_segments(a / "orders")
    for segment in segments[:-2]:  # retention: the oldest, with records not read yet
        segment.path.unlink()
    first_kept = segments[-2].start
    assert read_to[str(a)]["orders"] < first_kept
    with pytest.raises(ArchiveDataLossError,
                       match=f"records of topic orders in {a} at offsets "
                             f"{read_to[str(a)]['orders']} to {first_kept} were deleted"):
        reader.partitions(read_to, later)

    going_on = stream_reader({"path": str(a), "topics": "orders",
                              "failOnDataLoss": "false"}, ZperReader)
    planned = going_on.partitions(read_to, later)
    assert min(partition.begin for partition in planned) == first_kept
    with pytest.raises(ValueError, match="failOnDataLoss is true or false, not 'no'"):
        stream_reader({"path": str(a), "failOnDataLoss": "no"}, ZperReader)


def test_a_directory_that_is_not_an_archive_is_refused_naming_it(tmp_path):
    """It read as zero rows, as an empty archive does."""
    (a,) = nodes(tmp_path, "a")
    write(a, 0, 3)
    (tmp_path / "a" / "notes.txt").write_text("")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'a'} is not a pzq archive directory"):
        archive_dirs({"path": f"{a},{tmp_path / 'a'}"})  # the archive's parent
    (empty,) = nodes(tmp_path, "b")
    assert [archive.directory for archive in archive_dirs({"path": f"{a},{empty}"})] == [
        a, empty]
