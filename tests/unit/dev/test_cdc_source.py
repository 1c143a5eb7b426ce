"""The Debezium source's configuration: what Connect is handed, without the database password."""

from __future__ import annotations

from kafkalake.dev.cdc_source import LocalConnect
from kafkalake.dev.postgres import Database, write_secret
from kafkalake.launch.jars import GROUPS, debezium_coordinates


def _source(tmp_path, schemas_enable=True):
    secret = tmp_path / "pw"
    write_secret(secret, "s3cret-pw")
    db = Database("shop", "shop", "127.0.0.1", 5433, secret)
    return LocalConnect(
        tmp_path / "cdc", "127.0.0.1:9092", db, ("public.customers",), schemas_enable=schemas_enable
    )


def test_the_connector_names_the_password_through_the_file_provider_never_itself(tmp_path):
    source = _source(tmp_path)
    connector = source._connector_settings()
    worker = source._worker_settings(8083)
    assert "s3cret-pw" not in repr(connector) + repr(worker)
    assert (
        connector["database.password"]
        == f"${{file:{tmp_path / 'cdc' / 'secrets' / 'database.properties'}:password}}"
    )
    assert worker["config.providers.file.class"].endswith("FileConfigProvider")
    assert connector["plugin.name"] == "pgoutput"
    assert connector["skipped.operations"] == "none"  # truncates reach Kafka
    assert source.topic("public.customers") == "cdc.public.customers"


def test_the_json_envelope_is_a_choice(tmp_path):
    assert _source(tmp_path)._worker_settings(1)["value.converter.schemas.enable"] == "true"
    bare = _source(tmp_path, schemas_enable=False)._worker_settings(1)
    assert bare["value.converter.schemas.enable"] == bare["key.converter.schemas.enable"] == "false"


def test_debezium_is_a_jar_group_of_its_own():
    # Its own marker: adding it never re-resolves the broker's or Spark's jars.
    assert GROUPS["cdc"] == ("debezium",)
    names = {(c.org, c.name) for c in debezium_coordinates()}
    assert ("io.debezium", "debezium-connector-postgres") in names
    assert ("org.apache.kafka", "connect-runtime") in names
