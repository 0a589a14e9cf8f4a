"""Keep a bench's stdout for its JSON report alone.

The Temporal dev server prints a banner on the stdout it inherits, and the
SDK's Rust core logs its warnings there too; either would make the report
unparseable. Inside ``report_stdout()`` file descriptor 1 is stderr, so
everything but the report lands on stderr whichever process or thread
writes it; the report is printed after the block, on the real stdout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def report_stdout() -> Iterator[None]:
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
