"""Consumers of the crawl's output that run outside the Flink job.

- `consumers.corpus`: pages.parsed + takedowns on crawl.control → filtered, near-deduplicated Parquet
  files (a training corpus); `consumers.corpus_takedowns` removes taken-down rows from written files.
- `consumers.search`: pages.parsed + takedowns on crawl.control → a SQLite FTS5 full-text index.
- `consumers.stream`: what both share: the bounded Kafka read loop; `consumers.pages`: the pages.parsed
  contract check; `consumers.deadletter`: the file of records that cannot be handled (decision 3740).
- `consumers.tombstones`, `consumers.warc_compact`: takedowns applied to the WARC archive (a tombstone
  list, then optional compaction); `consumers.roots`: files under a local or S3 root (docs/governance.md).

Both commit their Kafka offsets only after their own output is durable, so a restarted consumer
goes on where it stopped (at-least-once; decision 1204). The crawler CLI wraps them
(`crawler corpus`, `crawler index`, `crawler search`, `crawler takedown-apply`, `crawler warc-compact`;
crawler/consumers.py).
"""
