"""Command-line tools for operators: run a job by hand, full refresh, schema history."""
