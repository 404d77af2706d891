"""Flink functions: keyed process functions, the async fetcher and sinks. Thin: they delegate to udfs."""
