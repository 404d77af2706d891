"""docs/decisions/README.md lists every decision record with its status, and no two records share a number
(scripts/decisions_index.py --check: the index is what the script would write, or it says what differs)."""
from __future__ import annotations

import subprocess
import sys

from crawler.paths import ROOT


def test_the_decisions_index_is_current_and_every_number_is_used_once() -> None:
    checked = subprocess.run([sys.executable, str(ROOT / "scripts" / "decisions_index.py"), "--check"],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr + \
        "\nrun: .venv/bin/python scripts/decisions_index.py"
