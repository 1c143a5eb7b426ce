"""The bench's kafka-delta-ingest stage: its table, its command line, its CPU figure, its failures."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from kafkalake.dev import bench_backlog, bench_kdi, bench_results


def test_the_table_holds_every_field_of_the_bench_event_typed_and_the_kafka_position(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    bench_kdi.create_table(tmp_path / "t")
    fields = {f.name: f.type.type for f in DeltaTable(str(tmp_path / "t")).schema().fields}
    event = json.loads(bench_backlog.event_value(7, random.Random(1)))
    assert list(fields)[: len(event)] == list(event)
    assert (fields["amount"], fields["ts"], fields["event_id"]) == ("double", "long", "string")
    assert (fields["kafka_partition"], fields["kafka_offset"]) == ("integer", "long")
    assert fields["kafka_timestamp"] == "timestamp"


def test_the_command_reads_from_the_earliest_offset_in_a_group_of_its_own() -> None:
    first = bench_kdi.command(Path("/bin/kdi"), "127.0.0.1:9", "t", Path("/lake/t"), 7)
    second = bench_kdi.command(Path("/bin/kdi"), "127.0.0.1:9", "t", Path("/lake/t"), 7)
    assert first[:4] == ["/bin/kdi", "ingest", "t", "/lake/t"]
    assert first[first.index("--auto_offset_reset") + 1] == "earliest"
    assert first[first.index("--allowed_latency") + 1] == "7"
    assert first[first.index("--consumer_group") + 1] != second[second.index("--consumer_group") + 1]
    transforms = [first[i + 1] for i, arg in enumerate(first) if arg == "--transform"]
    assert transforms == [
        "kafka_partition: kafka.partition",
        "kafka_offset: kafka.offset",
        "kafka_timestamp: kafka.timestamp",
    ]
    # It stops by the bench watching its table, never at the latest offsets (that drops its buffers).
    assert "-e" not in first and "--ends_at_latest_offsets" not in first


def test_cpu_seconds_counts_this_process_threads_and_all() -> None:
    before = bench_kdi.cpu_seconds(os.getpid())
    sum(i * i for i in range(3_000_000))
    after = bench_kdi.cpu_seconds(os.getpid())
    assert after > before
    usage = os.times()
    assert after == pytest.approx(usage.user + usage.system, abs=0.1)


def test_a_path_that_is_not_an_executable_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not an executable"):
        bench_kdi.run(tmp_path / "missing", "127.0.0.1:9", "t", 10, tmp_path)
    assert not (tmp_path / "lake-kdi").exists()


def test_a_binary_that_exits_early_fails_the_stage_with_what_it_wrote_and_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "kdi"
    fake.write_text("#!/bin/sh\necho 'no brokers' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"exited 3 with 0 of 10 rows written; its log: .*kdi\.log"):
        bench_kdi.run(fake, "127.0.0.1:9", "t", 10, tmp_path)
    assert "no brokers" in (tmp_path / "kdi.log").read_text()


def test_the_report_sets_kafka_delta_ingest_beside_ours_per_second_and_per_cpu_second() -> None:
    raw = bench_results.RawRead(records=1000, bytes=300_000, seconds=1.0, cpu_s=1.0)
    ours = bench_results.Drain(1000, 300_000, 10.0, 4.0, 1, 1.0, 1.0, 1, 1.0, cpu_s=20.0)
    kdi = bench_kdi.KdiRun(1000, 1000, 20.0, 6.0, 10.0, 2, 1.0, 5)
    text = bench_results.report(raw, ours, None, None, None, kdi)
    lines = {line[:34].rstrip(): line[34:].split() for line in text.splitlines() if line.strip()}
    assert lines["ours / kafka-delta-ingest, rec/s"] == ["2.00"]
    assert lines["  per CPU-second"] == ["0.50"]
    assert lines["records per CPU-second"] == ["1,000", "50"]
    assert lines["  records per CPU-second"] == ["100"]
    assert lines["  records / distinct offsets"] == ["1,000", "/", "1,000"]


@pytest.mark.parametrize("switch", ["on", "off"])
def test_the_report_says_which_way_the_jobs_ran(switch: str) -> None:
    raw = bench_results.RawRead(records=1000, bytes=300_000, seconds=1.0, cpu_s=1.0)
    ours = bench_results.Drain(1000, 300_000, 10.0, 4.0, 1, 1.0, 1.0, 1, 1.0, cpu_s=20.0)
    text = bench_results.report(raw, ours, None, None, jvm_extension=switch)
    lines = {line[:34].rstrip(): line[34:].split() for line in text.splitlines() if line.strip()}
    assert lines["kafkalake JVM extension"] == [switch]


def test_the_bench_refuses_a_switch_value_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    from kafkalake.dev import bench

    with pytest.raises(SystemExit):
        bench.main(["--jvm-extension", "maybe"])
    assert "--jvm-extension: invalid choice: 'maybe'" in capsys.readouterr().err
