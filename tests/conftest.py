from __future__ import annotations

import pytest

from tests.paths import SHARED


def pytest_report_header(config):
    return f"shared data: {SHARED} ({'found' if SHARED.is_dir() else 'MISSING'})"


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.fail(f"shared data folder not found at {SHARED}; set CRAWLER_SHARED_DIR")
    return SHARED
