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


@pytest.fixture(autouse=True, scope="session")
def audit_log_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory):
    """Takedowns sent by tests are audited into the session's tmp folder, never the project's out/."""
    from crawler.audit import AUDIT_ENV
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AUDIT_ENV, str(tmp_path_factory.mktemp("audit") / "audit.jsonl"))
        yield
