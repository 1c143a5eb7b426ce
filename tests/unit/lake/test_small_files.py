"""The lake's small-file operations on a local folder (the object-store side: test_object_store.py)."""

from __future__ import annotations

import pytest

from kafkalake.lake import small_files, store_settings


def test_read_write_list_and_delete(tmp_path):
    folder = f"file://{tmp_path}/a"
    assert small_files.read_text(f"{folder}/x.json") is None
    assert small_files.names(folder) == []

    small_files.write_text(f"{folder}/x.json", "one")
    small_files.write_text(f"{folder}/x.json", "two")

    assert small_files.read_text(f"{folder}/x.json") == "two"
    assert small_files.names(folder) == ["x.json"]  # no partial file left behind
    assert small_files.exists(tmp_path / "a" / "x.json")
    small_files.delete(f"{folder}/x.json")
    small_files.delete(f"{folder}/x.json")
    assert not small_files.exists(f"{folder}/x.json")


def test_create_text_refuses_an_existing_file(tmp_path):
    small_files.create_text(tmp_path / "v1", "first")
    with pytest.raises(FileExistsError):
        small_files.create_text(tmp_path / "v1", "second")
    assert small_files.read_text(tmp_path / "v1") == "first"


def test_rename_folder_moves_a_checkpoint_aside(tmp_path):
    small_files.write_text(tmp_path / "checkpoint" / "offsets" / "0", "v1")
    small_files.rename_folder(str(tmp_path / "checkpoint"), str(tmp_path / "checkpoint.replaced"))
    assert small_files.read_text(tmp_path / "checkpoint.replaced" / "offsets" / "0") == "v1"
    assert not (tmp_path / "checkpoint").exists()


def test_object_store_paths_are_joined_not_collapsed():
    # pathlib would turn s3a://b/t into s3a:/b/t: a local relative folder named "s3a:".
    assert small_files.join("s3a://b/t/", "_kafkalake", "schemas") == "s3a://b/t/_kafkalake/schemas"


def test_the_client_is_made_once_per_settings_in_use():
    """store_settings.use() needs no call into this module: the client follows the settings in use."""
    store_settings.use(store_settings.StorageSettings("http://127.0.0.1:1", "us-east-1", "AKIA1", "secret"))
    try:
        first = small_files.s3_client()
        assert small_files.s3_client() is first
        store_settings.use(
            store_settings.StorageSettings("http://127.0.0.1:2", "us-east-1", "AKIA1", "secret")
        )
        assert small_files.s3_client() is not first
        assert small_files.s3_client().meta.endpoint_url == "http://127.0.0.1:2"
    finally:
        store_settings.use(store_settings.StorageSettings())
