"""How the Flink job itself is shaped: parallelism, checkpoints, capacities, output locations."""
from __future__ import annotations

import dataclasses

from udfs.storage import is_s3_root, parse_s3_root

# The global job parameter under which jobs/crawl.py keeps its own argv (a JSON list of strings), read
# back by `crawler upgrade` (crawler/ops.py) to start the next version with the same arguments.
JOB_ARGS_KEY = "crawler.job-args"


@dataclasses.dataclass(frozen=True)
class JobPolicy:
    """The `[job]` section of the crawl configuration."""

    # Frontier shards. Hosts are spread over them by Flink key groups (docs/architecture.md §6).
    parallelism: int = 1
    # Fixed for the life of the savepoints: rescaling beyond it needs a fresh state.
    max_parallelism: int = 128
    # How often state and Kafka offsets are snapshotted; also bounds repeated fetches after a crash
    # (a longer interval is no faster: decision 1840).
    checkpoint_interval_ms: int = 10_000
    # Fetches in flight per fetch subtask (each is for a different host: the frontier leases one per host).
    fetch_capacity: int = 256
    # Parallel async fetch subtasks (each is a Python worker process).
    fetch_parallelism: int = 1
    # Where WARC files go: a local directory (default) or s3://bucket/prefix (then see [storage]).
    warc_root: str = "out/warc"
    # Kafka consumer group of the job's frontier source.
    group_id: str = "crawler"
    # Slot sharing group of the WARC writer. Its own group (the default) gives the writer a Python worker
    # process of its own beside the fetcher's, so WARC gzip and fsync do not wait for the fetcher's
    # interpreter lock (decision 1617); the job then takes
    # max(parallelism, fetch_parallelism) + parallelism slots. Empty (or "default"): the writer shares the fetcher's slots.
    writer_slot_group: str = "writer"
    # Slot sharing group of parse (and the dedup operators after it). Its own group (the default) gives
    # parse a Python worker process of its own, so the fetcher's event loop does not wait for page parsing
    # to let go of the interpreter lock (decision 1824); the job then takes `parallelism` more
    # slots. Empty (or "default"):
    # parse runs in the fetcher's worker; "writer": beside the WARC writers, in their slots.
    parse_slot_group: str = "parse"
    # Parallel parse subtasks, each a Python worker of its own in parse's slot sharing group (the dedup
    # probe runs beside each). Parse is the busiest Python worker: a second one lets it use
    # the CPU the other stages leave idle. Pages reach them round-robin from the fetchers. Unset: `parallelism`.
    parse_parallelism: int | None = None
    # Processing bundles of the Python workers: small bundles keep timers and checkpoints prompt.
    bundle_time_ms: int = 100
    bundle_size: int = 100
    # Longest a network buffer waits for more records before it is sent on (Flink's buffer timeout; 100 ms
    # is Flink's own default). With few hosts a host's next page waits for its last completion's return,
    # which crosses several such hops and the Python workers' bundles: a shorter timeout speeds up a
    # few-host crawl but costs rate at thousands of hosts, where CPU is the limit (decision 1835). Full
    # buffers go at once whatever it is.
    buffer_timeout_ms: int = 100
    # How much lower the frontier's CPU priority is than the rest of the TaskManager (a nice increment of
    # its task thread, 0-19; 0 leaves it alone). Discoveries outrun the frontier on a CPU-bound machine
    # and it takes any CPU it gets for judging that backlog; when the cores are contended, the page path
    # (fetch, parse, writers, dedup) goes first. 10 (a tenth of a normal thread's weight) gives a faster
    # crawl of thousands of hosts (decision 1839). With CPU to spare it changes nothing.
    frontier_nice: int = 10
    # The job's Kafka producer (every output topic): how long a record may wait for more to the same
    # partition before its batch is sent (Kafka's `linger.ms`; the client's default is 5), and the largest
    # batch (`batch.size`; 16 KB). The job's Kafka sources: the broker answers a fetch once it holds
    # `kafka_fetch_min_bytes` for it or `kafka_fetch_max_wait_ms` has passed (`fetch.min.bytes`,
    # `fetch.max.wait.ms`; 1 byte and 500 ms). Fewer, fuller requests: with thousands of hosts the broker
    # spends less CPU and the crawl is faster (decision 1841), for up to 50 + 100 ms more on a Kafka hop.
    # Few-host crawls, whose rate is the lease's trip, set the client's values back (`crawler demo` does).
    kafka_linger_ms: int = 50
    kafka_batch_bytes: int = 256 * 1024
    kafka_fetch_min_bytes: int = 64 * 1024
    kafka_fetch_max_wait_ms: int = 100
    # The crawl.frontier records of one host gathered over this many milliseconds, in Flink's own
    # operators, reach the frontier as one element (0: each record is an element). The frontier pays
    # about 150 µs an element besides its URLs' cost, and a page's discoveries for a host hold about 3
    # URLs: gathered over 500 ms, the frontier judges each URL in about two thirds of the CPU and keeps
    # up with the discoveries of a link-heavy crawl (decision 3914). The topic's records are unchanged.
    gather_discoveries_ms: int = 500

    @property
    def slots(self) -> int:
        """Task slots the job takes: the widest operator of each slot sharing group, summed (the
        writers' and parse's own groups; one group counted once)."""
        widest: dict[str, int] = {}
        for group, width in (("", max(self.parallelism, self.fetch_parallelism)),
                             (self.writer_slot_group, self.parallelism),
                             (self.parse_slot_group, self.parse_width)):
            group = "" if group == "default" else group
            widest[group] = max(widest.get(group, 0), width)
        return sum(widest.values())

    @property
    def parse_width(self) -> int:
        """Parse's parallelism: `parse_parallelism`, or the job's when unset."""
        return self.parallelism if self.parse_parallelism is None else self.parse_parallelism

    def __post_init__(self) -> None:
        for name in ("parallelism", "max_parallelism", "checkpoint_interval_ms", "fetch_capacity",
                     "fetch_parallelism", "bundle_time_ms", "bundle_size", "buffer_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("kafka_linger_ms", "kafka_fetch_max_wait_ms"):
            if not 0 <= getattr(self, name) <= 10_000:
                raise ValueError(f"{name} must be a number of milliseconds in [0, 10000], got {getattr(self, name)}")
        for name in ("kafka_batch_bytes", "kafka_fetch_min_bytes"):
            if not 1 <= getattr(self, name) <= 16 << 20:
                raise ValueError(f"{name} must be a number of bytes in [1, 16 MiB], got {getattr(self, name)}")
        gather = self.gather_discoveries_ms
        if isinstance(gather, bool) or not isinstance(gather, int) or not 0 <= gather <= 60_000:
            raise ValueError(f"gather_discoveries_ms must be a number of milliseconds in [0, 60000], got {gather!r}")
        nice = self.frontier_nice
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise ValueError(f"frontier_nice must be an integer in [0, 19], got {nice!r}")
        if self.parse_parallelism is not None and self.parse_parallelism < 1:
            raise ValueError(f"parse_parallelism must be at least 1 (or unset: the job's parallelism), "
                             f"got {self.parse_parallelism}")
        if self.parallelism > self.max_parallelism:
            raise ValueError(f"parallelism {self.parallelism} exceeds max_parallelism {self.max_parallelism}")
        if not self.warc_root:
            raise ValueError("warc_root must name a directory or an s3:// prefix")
        if is_s3_root(self.warc_root):
            parse_s3_root(self.warc_root)   # a malformed bucket or prefix fails at start-up, not at the first roll
