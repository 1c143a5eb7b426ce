"""Development tools: the local Kafka broker, sample producer, demo, bench, local Airflow.

May import anything; nothing in the runtime imports it.
"""
