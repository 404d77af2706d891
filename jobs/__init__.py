"""One module per Flink job."""
