"""Where the tests find the project and the shared test data."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CRAWLER_SHARED_DIR", ROOT.parent / "shared")).resolve()
TESTDATA = SHARED / "testdata"
WEBDATA = SHARED / "webdata"
