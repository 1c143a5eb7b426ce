"""Kafka without a JVM: client settings from a connection, offsets and watermarks, re-ingest windows.

Uses confluent-kafka (librdkafka); may read what the lake holds (:mod:`kafkalake.lake`) to compare.
"""
