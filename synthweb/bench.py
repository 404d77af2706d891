"""Throughput of the server: a subprocess server, an asyncio keep-alive client, page GETs only.

Each client connection takes one host at a time and fetches all of its pages in order (the way a
polite crawler walks a host), so most renders are cold: the figure includes link rewriting.
"""
from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from synthweb.generate import build_web
from synthweb.model import policy_from_dict, policy_to_dict
from synthweb.server import SyntheticWebProcess


async def _fetch_host(ip: str, port: int, name: str, paths: list[str], gzip: bool) -> tuple[int, int]:
    reader, writer = await asyncio.open_connection(ip, port)
    accept = "Accept-Encoding: gzip\r\n" if gzip else ""
    done = size = 0
    try:
        for path in paths:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {name}\r\n{accept}\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            size += len(await reader.readexactly(length))
            done += 1
    finally:
        writer.close()
    return done, size


async def _client(jobs: list[tuple[str, str, list[str]]], port: int, seconds: float, connections: int,
                  gzip: bool) -> tuple[int, int, float]:
    queue = iter(jobs)
    totals = [0, 0]
    start = time.monotonic()

    async def worker() -> None:
        for ip, name, paths in queue:
            if time.monotonic() - start > seconds:
                return
            n, b = await _fetch_host(ip, port, name, paths, gzip)
            totals[0] += n
            totals[1] += b

    await asyncio.gather(*(worker() for _ in range(connections)))
    return totals[0], totals[1], time.monotonic() - start


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to report cost per request under load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_bench(n_hosts: int, seed: int, seconds: float, connections: int, gzip: bool,
              policy_file: str | None, prewarm: bool = False) -> dict[str, float]:
    """Requests per second and MB/s the server sustains for page GETs (bounded by `seconds`)."""
    overrides = json.loads(Path(policy_file).read_text()) if policy_file else {}
    overrides.setdefault("behaviour_share", 0.0)  # no slow or trap pages in a throughput figure
    policy = policy_from_dict(overrides)
    web = build_web(n_hosts, seed, policy)
    with tempfile.TemporaryDirectory() as tmp:
        pfile = Path(tmp) / "policy.json"
        pfile.write_text(json.dumps(policy_to_dict(policy)))
        with SyntheticWebProcess(n_hosts, seed, Path(tmp), policy_file=pfile, prewarm=prewarm) as server:
            jobs = [(h.ip, h.name, [p.path for p in h.pages]) for h in web.hosts]
            cpu0 = _cpu_seconds(server.pid)
            n, size, elapsed = asyncio.run(_client(jobs, server.port, seconds, connections, gzip))
            cpu = _cpu_seconds(server.pid) - cpu0
    return {"requests": n, "seconds": round(elapsed, 2), "requests_per_s": round(n / elapsed, 1),
            "mb_per_s": round(size / elapsed / 1e6, 1),
            "server_cpu_s": round(cpu, 2), "requests_per_server_cpu_s": round(n / max(cpu, 1e-9), 1), "gzip": gzip, "connections": connections, "prewarm": prewarm}
