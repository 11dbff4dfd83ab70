"""Retrieval evaluation: `spark-pg eval --dataset DIR` scores spark.retrieve against three baselines.

A dataset is a folder with ``memories.jsonl`` and ``queries.jsonl`` (see :mod:`spark_pg.eval.dataset`);
each conversation becomes one tenant of a scratch database, and every question is asked as of its time.
"""
