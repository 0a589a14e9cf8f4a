"""The ``turns`` command line.

Every command is one function, registered with ``@command``: its name, a
one-line help, and the arguments it takes (``arg(...)``, the arguments of
``ArgumentParser.add_argument``). ``main`` builds one argparse subparser per
registered command and calls the function with the parsed namespace; the
function returns the exit code. Adding a command is writing one decorated
function; a command that talks to Temporal imports the client inside itself,
so file-only commands (``validate``, ``state``, ``show``, ``log``,
``inspect``, ``repair``) never pay for it and never start a server.

Commands that need Temporal connect through ``turnclient.runtime.connection.temporal``:
``TEMPORAL_ADDRESS`` when it is set, otherwise the work dir's embedded dev
server (started, shared or reused; stopped by the last command using it).
Commands that advance a turn also run a worker in this process unless
``--no-worker`` says workers run elsewhere; their model calls then stream
text deltas straight to the terminal.

Exit codes (also in ``turns --help``): 0 completed, or success for commands
that do not settle a turn (``turns progress``: the progress was accepted);
1 an infrastructure or configuration problem (a corrupt or unreadable turn
file, no server, a broken turns.toml, a dependency the turn needs is
missing); 2 bad arguments or usage; 3 the turn is suspended; 4 the turn
failed; 5 the turn was cancelled; 6 the input was rejected (nothing
changed). Every failure prints one line on stderr. With ``--json`` stdout
carries exactly one JSON document (JSON lines for ``turns watch``), also
for failures: ``{"status": "error" | "rejected", "error", "exitCode"}``.

The package: ``main`` (the parser and ``entry``), ``common`` (what every
command shares), one module per group of commands (``reading``: validate,
state, show, log, inspect, watch, list; ``running``: run; ``chat``;
``deciding``: approve, deny, complete, progress, cancel, recover;
``serving``: worker, dev, ui, codec-server; ``admin``: repair, db, export,
import, config, completion), and the terminal renderers (``render``,
``follow``). Importing this package registers every command.

File commands read through ``turncore.storage.repository``, the same strict reader
the runtime uses: every line is parsed and validated and the whole log
reduced, so a file ``turns validate`` accepts is one the runtime can load.
"""

from __future__ import annotations

# Each command module registers its commands on import; the order here is the
# order of `turns --help` (main.ORDER keeps the listing as it always was).
from turnclient.cli import admin, chat, deciding, reading, running, serving
from turnclient.cli.main import build_parser, entry, main

__all__ = [
    "admin",
    "build_parser",
    "chat",
    "deciding",
    "entry",
    "main",
    "reading",
    "running",
    "serving",
]
