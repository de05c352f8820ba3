"""ZPER's own Java reader test and perf clients against a real node (opt-in).

With ``PZQ_ZPER_SRC`` naming a ZPER checkout and a JDK and jeromq at hand (where they
are looked for: tests/support/zper_java.py), ZPER's ``TestZPReader`` runs unchanged
under JUnit, ZPER's ``TestZPWriter`` sends as it does, and ZPER's perf producer and
consumer write and read 30 000 messages. ``TestZPReader`` connects to
``127.0.0.1:6556`` and compares the node's answers with ZPER's own ``ZLog`` over a
copy of the node's archive folder (our ``org.zper.ZPer`` stands in for ZPER's broker).
Without them every test here skips, saying what to set.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from pzq.bench.ports import ports_free
from tests.support import zper_java

ZPER = zper_java.find()
READER_PORT = 6556  # TestZPReader's, written in the test
MESSAGES_PER_SIZE = 10_000
SIZES = (254, 255, 256)  # a short frame, the longest short one, a long one (9 header bytes)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(isinstance(ZPER, str), reason=str(ZPER))]


@pytest.fixture(scope="module")
def zper(tmp_path_factory: pytest.TempPathFactory) -> tuple[zper_java.ZperJava, Path]:
    assert isinstance(ZPER, zper_java.ZperJava)
    classes = tmp_path_factory.mktemp("zper-classes")
    ZPER.compile(classes)
    return ZPER, classes


@pytest.fixture(scope="module")
def jeromq(zper) -> set[str]:
    """What tests/support/zper_java/JeromqProbe.java says of the jeromq at hand."""
    java, classes = zper
    ran = java.run(classes, "JeromqProbe", timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return set(ran.stdout.splitlines())


@pytest.fixture
def zper_node(start_node, tmp_path):
    """A node whose reader is where TestZPReader connects, a ZPER writer beside it, and
    segments of 750 000 bytes (the perf run fills eleven)."""
    if not ports_free([READER_PORT]):
        pytest.skip(f"port {READER_PORT}, where ZPER's TestZPReader connects, is in use")
    node = start_node("--archive-dir", str(tmp_path / "archive"),
                      "--archive-dsn", f"tcp://127.0.0.1:{READER_PORT}",
                      "--zper-writer-dsn", "tcp://127.0.0.1:*", "--segment-size", "750000",
                      "--flush-messages", "1000", "--flush-interval", "100")
    node.archive_dir = tmp_path / "archive"
    node.writer = node.event("node_ready")["zper_writer"].removeprefix("tcp://")
    return node


def run_reader_test(zper, node, copy: Path) -> str:
    """ZPER's TestZPReader (testOffset, testFetch) under JUnit, its expectations read by
    ZPER's ZLog from a copy of the node's archive once all of it is durable (a FETCH
    hands out no more)."""
    java, classes = zper
    node.wait_archive_durable()
    shutil.copytree(node.archive_dir, copy)
    ran = java.run(classes, "org.junit.runner.JUnitCore", "org.zper.TestZPReader",
                   properties={"pzq.zper.base_dir": str(copy)})
    assert ran.returncode == 0 and "OK (2 tests)" in ran.stdout, ran.stdout + ran.stderr
    return ran.stdout


def zper_frame(payload: bytes, more: bool) -> bytes:
    """A frame as ZPER's writer stores it: flag, then 1 length byte up to 255, else the
    long flag and 8 bytes."""
    flag = 1 if more else 0
    if len(payload) > 255:
        return bytes([flag | 2]) + struct.pack(">q", len(payload)) + payload
    return bytes([flag, len(payload)]) + payload


def perf_record(size: int) -> bytes:
    """What ZPER's perf producer sends for a message of ``size`` bytes ('x' each): a
    header frame (0, then the payload's CRC32) and the payload."""
    payload = b"x" * size
    return zper_frame(b"\0" + struct.pack(">I", zlib.crc32(payload)), True) + \
        zper_frame(payload, False)


def segments_bytes(archive: Path, topic: str) -> tuple[int, bytes]:
    files = sorted((archive / topic).glob("*.dat"))
    return len(files), b"".join(path.read_bytes() for path in files)


def produce_perf_messages(zper, node) -> None:
    java, classes = zper
    for size in SIZES:
        ran = java.run(classes, "org.zper.perf.ProducerPerformance", "-t", "test",
                       "-w", node.writer, "-n", str(MESSAGES_PER_SIZE), "-s", str(size))
        assert ran.returncode == 0, ran.stdout + ran.stderr
    total = MESSAGES_PER_SIZE * len(SIZES)
    node.wait_stats(lambda s: s["zper"]["writer"]["written"] == total, timeout=60,
                    message=f"{total} ZPER writes")
    node.wait_archive_durable(timeout=30)


def write_hello(zper, node, kind: str) -> None:
    """TestZPWriter's send (testSend over DEALER, testSendPush over PUSH): "hello" to
    topic "test"; the test reads the offset of a ZLog in its own process, so our
    WriterCheck asks the node's reader instead and wants it grown by 5 + 2 bytes."""
    java, classes = zper
    ran = java.run(classes, "WriterCheck", f"tcp://{node.writer}",
                   f"tcp://127.0.0.1:{READER_PORT}", kind, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_zper_reader_test_passes_on_an_empty_archive_and_after_a_dealer_send(
        zper, zper_node, tmp_path):
    run_reader_test(zper, zper_node, tmp_path / "empty")
    write_hello(zper, zper_node, "DEALER")
    write_hello(zper, zper_node, "DEALER")
    assert segments_bytes(zper_node.archive_dir, "test") == (1, zper_frame(b"hello", False) * 2)
    run_reader_test(zper, zper_node, tmp_path / "one-segment")


def test_zper_push_send_is_stored(zper, zper_node, jeromq, tmp_path):
    if "zmtp 2" not in jeromq:
        pytest.skip(f"jeromq {zper[0].jars[0]} speaks ZMTP 3.0 (0.5 and later), which, as "
                    "libzmq, does not connect a PUSH to a ROUTER: TestZPWriter's "
                    "testSendPush needs a jeromq before 0.5 (ZPER's 0.3.5, Debian's 0.3.6)")
    write_hello(zper, zper_node, "PUSH")
    assert segments_bytes(zper_node.archive_dir, "test") == (1, zper_frame(b"hello", False))
    run_reader_test(zper, zper_node, tmp_path / "after-push")


def test_zper_perf_producer_writes_zper_segments_and_reader_test_passes_on_them(
        zper, zper_node, tmp_path):
    produce_perf_messages(zper, zper_node)
    count, written = segments_bytes(zper_node.archive_dir, "test")
    assert count == 11
    assert written == b"".join(perf_record(size) * MESSAGES_PER_SIZE for size in SIZES)
    run_reader_test(zper, zper_node, tmp_path / "eleven-segments")


def test_zper_perf_consumer_reads_every_message(zper, zper_node, jeromq):
    java, classes = zper
    if "slices keep bounds" not in jeromq:
        pytest.skip(f"jeromq {java.jars[0]}'s message slices read as the whole reply "
                    "(up to 0.5.1), so ZPER's perf consumer misreads any broker's replies: "
                    "set PZQ_JEROMQ_JAR to jeromq 0.5.2 or later")
    produce_perf_messages(zper, zper_node)
    total = MESSAGES_PER_SIZE * len(SIZES)
    ran = java.run(classes, "org.zper.perf.ConsumerPerformance", "-t", "test",
                   "-r", f"127.0.0.1:{READER_PORT}", "-n", str(total))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # start, end, fetch size, MB, MB/s, messages read, messages/s; it reads up to an
    # empty FETCH, so a record handed out twice would count
    summary = ran.stdout.strip().splitlines()[-1].split(", ")
    assert int(summary[5]) == total, ran.stdout
