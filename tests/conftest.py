from __future__ import annotations

import pytest

from tests.paths import SHARED


def pytest_report_header(config):
    return f"shared data: {SHARED} ({'found' if SHARED.is_dir() else 'MISSING'})"


def pytest_configure(config):
    """Stop at once, with the fix, when the shared test data is not where the tests look: test modules
    read it at import, so without this a clone outside /work ends in collection errors instead."""
    if not SHARED.is_dir():
        raise pytest.UsageError(f"shared data folder not found at {SHARED}: set CRAWLER_SHARED_DIR to the "
                                "folder holding testdata/ and webdata/ (README)")


@pytest.fixture(scope="session")
def shared_dir():
    return SHARED   # pytest_configure made sure it exists


@pytest.fixture(autouse=True, scope="session")
def audit_log_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory):
    """Takedowns sent by tests are audited into the session's tmp folder, never the project's out/."""
    from durable.audit_log import AUDIT_ENV
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(AUDIT_ENV, str(tmp_path_factory.mktemp("audit") / "audit.jsonl"))
        yield
