"""Pure crawling logic: no I/O, no pyflink, aiohttp or kafka imports.

Every decision the crawler makes about a URL, a robots.txt file or a page lives here as a
plain function over values, so the Flink operators stay thin and everything is unit-testable.
"""
