"""Kafka, the bus the crawl runs on, as the job, the CLI and the tests use it outside Flink's own
connectors: producing and reading records, topics and offsets (`kafka_io`), and the check for records
a topic's retention deleted before the job read them (`retention_gap`). Below `operators`, `jobs` and
`crawler`; imports only `udfs`; no PyFlink.
"""
