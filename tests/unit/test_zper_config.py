"""The options of the archive's ZPER broker and size retention: CLI, file, refusals."""

from __future__ import annotations

import pytest

from pzq.errors import ConfigError
from pzq.node.options import build_config

pytestmark = pytest.mark.timeout(30)


def test_options_from_the_config_file_reach_the_archive(tmp_path):
    path = tmp_path / "pzq.toml"
    path.write_text('archive-dir = "a"\nretain-bytes = 1000000\n'
                    'zper-writer-dsn = "tcp://*:5555"\nzper_ack_dsn = "tcp://*:5557"\n'
                    'zper-relay-dsn = "tcp://*:5558"\nrelay-poll = 250\n')
    config = build_config({}, path)
    assert config.archive is not None and config.archive.retain_bytes == 1_000_000
    assert (config.endpoints["zper_writer"], config.endpoints["zper_ack"],
            config.endpoints["zper_relay"]) == ("tcp://*:5555", "tcp://*:5557", "tcp://*:5558")
    assert config.relay_poll_us == 250_000  # 250 ms: the relay part's tick (test_registry.py)


@pytest.mark.parametrize("values, message", [
    ({"retain_bytes": -1}, "--retain-bytes must be 0 or more"),
    ({"relay_poll": 0}, "--relay-poll must be greater than 0"),
    ({"zper_writer_dsn": "tcp://*:5555"}, "--zper-writer-dsn needs --archive-dir"),
    ({"zper_ack_dsn": "tcp://*:5557"}, "--zper-ack-dsn needs --archive-dir"),
    ({"zper_relay_dsn": "tcp://*:5558"}, "--zper-relay-dsn needs --archive-dir"),
    ({"archive_dir": "a", "zper_writer_dsn": "5555"}, "--zper-writer-dsn '5555' is not a "
                                                      "ZeroMQ endpoint"),
])
def test_bad_values_are_refused_naming_the_option(values, message):
    with pytest.raises(ConfigError, match=message):
        build_config(values)


def test_the_archive_in_the_store_s_own_directory_is_refused(tmp_path, monkeypatch):
    """A node took --archive-dir the same as --database: its topic folders and .lock
    among LevelDB's files, which the store's repair and backup treat as the store's."""
    monkeypatch.chdir(tmp_path)
    for database, archive in (("pzq-data", "pzq-data"), ("pzq-data", "./pzq-data/"),
                              (str(tmp_path / "pzq-data"), "pzq-data")):
        with pytest.raises(ConfigError, match=(
                f"^--archive-dir {archive} is the --database directory: give the archive "
                "a directory of its own, not the store's$")):
            build_config({"database": database, "archive_dir": archive})
    assert build_config({"database": "pzq-data", "archive_dir": "pzq-data/archive"}).archive
