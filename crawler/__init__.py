"""The `crawler` command line: local stack, crawl submission, demo."""
