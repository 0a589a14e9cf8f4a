"""``python -m turnclient.cli``: the ``turns`` command."""

from turnclient.cli import entry

entry()
