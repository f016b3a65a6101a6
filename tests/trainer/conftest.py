"""Trainer tests: keep each test's outcome on its item, so fixtures can print the trainers' logs on failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
