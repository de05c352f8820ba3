"""The node's descriptor watch: a warning at 90 % of the limit, said again once a
minute while it lasts, and one line when below 80 % again."""

from __future__ import annotations

import structlog

from pzq.node.descriptors import DescriptorWatch, open_descriptors


def test_warned_once_a_minute_while_short_and_told_when_enough_again():
    watch = DescriptorWatch()
    with structlog.testing.capture_logs() as logs:
        for used, now in ((80, 0.0), (90, 1.0), (99, 30.0), (95, 61.0), (85, 70.0),
                          (79, 75.0), (79, 80.0)):
            watch.check(used, 100, now)
    assert [(log["event"], log["open"]) for log in logs] == [
        ("descriptors_running_out", 90), ("descriptors_running_out", 95),
        ("descriptors_enough", 79)]
    assert all(log["limit"] == 100 for log in logs)


def test_the_process_s_descriptors_are_counted():
    assert 3 <= open_descriptors(10**6) < 10**6


def test_a_list_that_cannot_be_read_is_said_once_and_the_watch_ends(tmp_path):
    """The watch's thread must not die with a traceback on stderr when the list of
    descriptors cannot be read (gone, or not a folder): one warning, and it stops."""
    not_a_folder = tmp_path / "fd"
    not_a_folder.write_text("")
    watch = DescriptorWatch(every_s=0.001, listed=not_a_folder)
    with structlog.testing.capture_logs() as logs:
        watch._run()  # (the thread's body: it returns rather than raise)
    assert [(log["event"], "Not a directory" in log["error"]) for log in logs] == [
        ("descriptors_uncounted", True)]
