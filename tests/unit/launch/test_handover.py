"""The private hand-over file: settings a task gives its job, never on a command line."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile

import pytest

from kafkalake.core.errors import KafkaConfigError
from kafkalake.launch.handover import config_file, read_config_file, sweep_stale


def test_config_file_is_private_and_removed_after_the_block():
    settings = {"bootstrap.servers": "b:9093", "sasl.jaas.config": "secret"}
    with config_file(settings) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert path.parent.name.startswith("kafkalake-")
        assert read_config_file(path) == settings
        assert read_config_file(str(path)) == settings
    assert not path.exists()
    assert not path.parent.exists()


def test_config_file_is_removed_when_the_block_raises():
    with pytest.raises(RuntimeError), config_file({"bootstrap.servers": "b"}) as path:
        raise RuntimeError("spark-submit failed")
    assert not path.exists()
    assert not path.parent.exists()


def test_each_config_file_gets_its_own_folder():
    with config_file({"bootstrap.servers": "a"}) as first, config_file({"bootstrap.servers": "b"}) as second:
        assert first.parent != second.parent
        assert read_config_file(first) == {"bootstrap.servers": "a"}
        assert read_config_file(second) == {"bootstrap.servers": "b"}


def test_read_config_file_turns_values_into_strings(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"bootstrap.servers": "b", "request.timeout.ms": 30000}))
    assert read_config_file(path) == {"bootstrap.servers": "b", "request.timeout.ms": "30000"}


@pytest.mark.parametrize(
    "content", [{"security.protocol": "SSL"}, ["bootstrap.servers"], "bootstrap.servers"]
)
def test_read_config_file_requires_bootstrap_servers(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content))
    with pytest.raises(KafkaConfigError) as excinfo:
        read_config_file(path)
    assert str(path) in str(excinfo.value)
    assert "bootstrap.servers" in str(excinfo.value)


def test_read_config_file_can_delete_the_file_once_read():
    with config_file({"bootstrap.servers": "b", "sasl.password": "x"}) as path:
        assert read_config_file(path, remove=True)["sasl.password"] == "x"
        assert not path.exists()


def test_a_missing_or_garbled_settings_file_is_a_configuration_error_naming_it(tmp_path):
    gone = tmp_path / "kafka-client.json"
    with pytest.raises(KafkaConfigError, match=f"{gone}: cannot read the Kafka client settings"):
        read_config_file(gone)
    gone.write_bytes(b'{"bootstrap.servers": "a"\xff')
    with pytest.raises(KafkaConfigError, match=f"{gone}: not JSON"):
        read_config_file(gone, remove=True)
    assert not gone.exists()


def test_a_settings_folder_left_by_a_killed_writer_is_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"kafkalake-secrets-{dead.pid}-abc"
    stale.mkdir(mode=0o700)
    (stale / "kafka-client.json").write_text('{"sasl.password": "x"}')
    alive = tmp_path / f"kafkalake-secrets-{os.getpid()}-def"
    alive.mkdir(mode=0o700)
    assert sweep_stale(tmp_path) == [stale]
    assert not stale.exists()
    assert alive.exists()


def test_config_file_sweeps_before_it_writes(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"kafkalake-secrets-{dead.pid}-abc"
    stale.mkdir(mode=0o700)
    with config_file({"bootstrap.servers": "b"}) as path:
        assert path.parent.parent == tmp_path
        assert not stale.exists()
