"""Shared test setup: hypothesis profiles, the shared data folder, and a guard against empty runs."""
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile(
    "ci", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

SHARED_DATA = Path(os.environ.get("ISTAR_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark files in ../shared/data; tests that need them skip with a reason when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA} (set ISTAR_SHARED_DATA)")
    return SHARED_DATA


def pytest_sessionfinish(session, exitstatus):
    """A run that executed no test at all is a failure, even when pytest would exit 0 (all skipped)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if not reporter.stats.get("passed") and not reporter.stats.get("failed"):
        session.exitstatus = 1
        reporter.write_line("ERROR: no test passed or failed (all skipped or none collected)", red=True)
