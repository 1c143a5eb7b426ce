"""The batch benchmark's pure parts: its ``--conf`` pairs and its summary (the runs themselves need a
broker and a Spark session: ``python -m kafkalake.dev.bench_batch``)."""

from __future__ import annotations

import pytest

from kafkalake.dev.bench_batch import RunFigures, main, records, settings, summary


def test_conf_pairs_become_settings_the_last_one_winning():
    got = settings(["spark.sql.shuffle.partitions=1", "a.b=x=y", " spark.sql.shuffle.partitions =3"])
    assert got == {"spark.sql.shuffle.partitions": "3", "a.b": "x=y"}


@pytest.mark.parametrize("pair", ["spark.sql.shuffle.partitions", "=1", " =1"])
def test_a_pair_without_a_key_or_a_value_is_refused_naming_it(pair):
    with pytest.raises(ValueError, match="expected key=value"):
        settings([pair])


def test_the_command_line_refuses_a_bad_pair_before_starting_anything(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--conf", "no-equals-sign"])
    assert stopped.value.code == 2
    assert "--conf 'no-equals-sign'" in capsys.readouterr().err


def test_the_summary_leaves_the_warm_up_runs_out():
    runs = [RunFigures(9.0, 12.0, 30, 60), RunFigures(4.0, 5.0, 22, 39)]
    runs += [RunFigures(3.0 + i / 10, 4.0 + i, 22, 39) for i in range(3)]
    assert summary(runs, 2) == "runs 3-5: JVM CPU-s median 5.00, sum 15.0; wall median 3.10 s"
    assert "ask for more --runs" in summary(runs[:2], 2)


def test_the_records_cover_both_partitions_and_fifty_keys():
    made = records(200)
    assert {r.partition for r in made} == {0, 1}
    assert len({r.key for r in made}) == 50
