"""kafkalake: land Kafka topics in Delta Lake tables through one Airflow DAG per topic."""
