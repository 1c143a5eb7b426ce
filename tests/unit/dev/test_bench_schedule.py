"""The bench's compressed day (kafkalake.dev.bench_schedule.day): the same for a seed, in time order,
within the day, and shaped per topic: bursts, a trickle, a quiet topic."""

from __future__ import annotations

from kafkalake.dev.bench_schedule import day


def test_the_day_is_reproducible_ordered_and_shaped():
    plan = day(topics=5, seconds=600, rate=0.5)
    assert plan == day(topics=5, seconds=600, rate=0.5)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert all(0 <= p.at_s < 600 for p in plan)
    per_topic = {i: [p for p in plan if p.topic == i] for i in range(5)}
    assert [len(per_topic[i]) for i in (0, 3)] == [3, 3] and all(p.count == 1000 for p in per_topic[0])
    assert 200 <= len(per_topic[1]) <= 400 and all(p.count == 1 for p in per_topic[1])
    assert len(per_topic[2]) == 3 and all(p.at_s <= 60 for p in per_topic[2])
