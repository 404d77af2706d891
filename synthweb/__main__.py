"""`python -m synthweb serve|describe|bench`: run, inspect or measure the synthetic web."""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections import Counter
from pathlib import Path

from synthweb.generate import build_web
from synthweb.model import Web, WebPolicy, policy_from_dict, write_host_map, write_seeds
from synthweb.reqlog import RequestLog
from synthweb.server import WebServer


def _policy(args: argparse.Namespace) -> WebPolicy:
    values = json.loads(Path(args.policy).read_text()) if args.policy else {}
    if args.clock_speed is not None:
        values["clock_speed"] = args.clock_speed
    return policy_from_dict(values)


def _web(args: argparse.Namespace) -> Web:
    return build_web(args.hosts, args.seed, _policy(args))


async def _serve(args: argparse.Namespace) -> None:
    web = _web(args)
    log = RequestLog(Path(args.log) if args.log else None)
    server = WebServer(web, args.port, log, prewarm=args.prewarm)
    port = await server.start()
    if args.host_map:
        write_host_map(web, Path(args.host_map), omit=args.host_map_omit)
    if args.seeds:
        write_seeds(web, Path(args.seeds), port, args.seeds_limit)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"synthweb: {len(web.hosts)} hosts on {len(web.by_ip)} addresses, port {port}", flush=True)
    if args.ready_file:  # written last, whole, so a parent polling it sees the port only when ready
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(f"{port}\n")
        tmp.rename(args.ready_file)
    await stop.wait()
    await server.close()
    log.close()


def _describe(args: argparse.Namespace) -> None:
    web = _web(args)
    print(json.dumps({
        "hosts": len(web.hosts), "addresses": len(web.by_ip),
        "shared_hosts": sum(len(hs) for hs in web.by_ip.values() if len(hs) > 1),
        "pages": sum(len(h.pages) for h in web.hosts),
        "robots": Counter(h.robots.value for h in web.hosts),
        "behaviours": Counter(b.value for h in web.hosts for b in h.behaviours),
        "crawl_delay_hosts": sum(1 for h in web.hosts if h.crawl_delay),
        "sitemap_hosts": sum(1 for h in web.hosts if h.sitemap),
    }, indent=1, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthweb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "describe", "bench"):
        p = sub.add_parser(name)
        p.add_argument("--hosts", type=int, default=2000)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--policy", help="JSON file of WebPolicy overrides")
        p.add_argument("--clock-speed", type=float, help="simulated seconds per wall second")
        if name == "serve":
            p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
            p.add_argument("--log", help="JSON-lines request log")
            p.add_argument("--host-map", help="write 'hostname ip' lines here")
            p.add_argument("--host-map-omit", action="append", default=[], metavar="HOST",
                           help="leave this host out of the host map (a crawler must resolve it by DNS); repeatable")
            p.add_argument("--seeds", help="write one home page URL per host here")
            p.add_argument("--seeds-limit", type=int, help="only the first N hosts as seeds")
            p.add_argument("--ready-file", help="write the port here once listening")
            p.add_argument("--prewarm", action="store_true", help="template every real page before serving")
        if name == "bench":
            p.add_argument("--seconds", type=float, default=5.0)
            p.add_argument("--connections", type=int, default=16)
            p.add_argument("--gzip", action="store_true", help="send Accept-Encoding: gzip")
            p.add_argument("--prewarm", action="store_true", help="measure with every template made")
    args = parser.parse_args(argv)
    if args.command == "serve":
        asyncio.run(_serve(args))
    elif args.command == "describe":
        _describe(args)
    else:
        from synthweb.bench import run_bench
        print(json.dumps(run_bench(args.hosts, args.seed, args.seconds, args.connections, args.gzip,
                                   args.policy, args.prewarm), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
