"""Where the project keeps things on disk."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Everything downloaded or started on first use lives here (git-ignored), so `rm -rf .cache` resets it.
CACHE = Path(os.environ.get("CRAWLER_CACHE_DIR", ROOT / ".cache")).resolve()
JAVA = ROOT / "java"
