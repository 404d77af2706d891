"""The synthetic web: thousands of hosts on 127.x loopback addresses, real pages, robots variants,
hostile behaviours and a request log that politeness audits read (docs/decisions/07xx)."""
from synthweb.audit import Violation, audit_politeness
from synthweb.generate import HostOverride, build_web
from synthweb.model import (Behaviour, Host, Page, RobotsVariant, Web, WebPolicy, write_host_map,
                            write_seeds)
from synthweb.reqlog import RequestLog, load_log
from synthweb.server import SyntheticWeb, SyntheticWebProcess

__all__ = ["Behaviour", "Host", "HostOverride", "Page", "RequestLog", "RobotsVariant", "SyntheticWeb",
           "SyntheticWebProcess", "Violation", "Web", "WebPolicy", "audit_politeness", "build_web",
           "load_log", "write_host_map", "write_seeds"]
