"""The synthetic web's `/.well-known/tdmrep.json` files (W3C TDMRep, "TDM File on the Origin Server")."""
from __future__ import annotations

import json

from synthweb.model import Host

TDMREP_PATH = "/.well-known/tdmrep.json"
TDM_POLICY = "https://example.test/tdm-policy.json"


def tdmrep_body(host: Host) -> bytes | None:
    """The host's tdmrep.json: its reserved location first, then (for a section) the rest of the site
    explicitly unreserved, so the first-match rule decides; None when the host has no file."""
    if host.tdmrep_reserved is None:
        return None
    rules: list[dict[str, object]] = [
        {"location": host.tdmrep_reserved, "tdm-reservation": 1, "tdm-policy": TDM_POLICY}]
    if host.tdmrep_reserved != "/":
        rules.append({"location": "/", "tdm-reservation": 0})
    return json.dumps(rules, indent=1).encode()
