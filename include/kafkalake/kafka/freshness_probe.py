"""Look at a topic without consuming it: watermarks, and the timestamp of the record at an offset.

For the ``schedule: freshness`` watcher (kafkalake.airflow.freshness_trigger). One librdkafka
consumer per Kafka connection serves every topic that shares it: it never joins its group and
never commits (``enable.auto.commit`` false, offsets given by ``assign``); it only fetches.

The oldest unlanded record's timestamp is read by assigning each lagging partition at the table's
offset and fetching one record: one small fetch per partition (fetch sizes are kept to a few KiB,
and ``queued.min.messages`` to 1, so librdkafka does not prefetch a backlog it would throw away).
The timestamp of a given offset never changes, so the watcher asks once per table position.
``offsets_for_times`` goes the other way (time → offset): finding a timestamp with it would take a
search of several requests per partition.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from kafkalake.kafka.offsets import consumer_watermarks, open_consumer

log = logging.getLogger(__name__)

#: Fetch as little as one record needs (librdkafka still returns a whole first batch when larger).
PROBE_SETTINGS = {
    "max.partition.fetch.bytes": "8192",
    "queued.min.messages": "1",
    "queued.max.messages.kbytes": "64",
    "enable.partition.eof": "true",
}
GROUP = "kafkalake-freshness"


class Probe:
    """One connection's consumer; calls are serialised (a consumer's assignment is not shareable)."""

    def __init__(self, client_config: Mapping[str, str]) -> None:
        self.config = dict(client_config)
        self.consumer, self.seen = open_consumer({**self.config, **PROBE_SETTINGS}, GROUP)
        self.lock = threading.Lock()

    def watermarks(self, topic: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
        """(earliest, end) offsets per partition; raises as :func:`kafkalake.kafka.offsets.watermarks`."""
        with self.lock:
            return consumer_watermarks(self.consumer, self.seen, self.config, topic, timeout)

    def timestamps_at(
        self, topic: str, offsets: Mapping[int, int], timeout: float = 5.0
    ) -> dict[int, datetime | None]:
        """Per partition, the timestamp of the first record at or after its offset (None: the record
        has no timestamp, or none came within ``timeout``)."""
        from confluent_kafka import KafkaError, TopicPartition

        found: dict[int, datetime | None] = {}
        with self.lock:
            self.consumer.assign([TopicPartition(topic, p, o) for p, o in sorted(offsets.items())])
            try:
                deadline = time.monotonic() + timeout
                while len(found) < len(offsets) and time.monotonic() < deadline:
                    for message in self.consumer.consume(len(offsets), timeout=min(1.0, timeout)):
                        partition = message.partition()
                        if partition in found:
                            continue
                        error = message.error()
                        if error is not None:
                            if error.code() == KafkaError._PARTITION_EOF:
                                found[partition] = None
                            continue
                        kind, millis = message.timestamp()
                        usable = (
                            kind != 0 and millis is not None and millis >= 0
                        )  # 0: TIMESTAMP_NOT_AVAILABLE
                        found[partition] = datetime.fromtimestamp(millis / 1000, UTC) if usable else None
            finally:
                self.consumer.unassign()
        return {p: found.get(p) for p in offsets}

    def close(self) -> None:
        with self.lock:
            self.consumer.close()
