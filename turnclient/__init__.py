"""The client side of turncore: the ``turns`` command line and the Temporal client API.

Modules here may import ``temporalio`` (``turncore`` may not). ``cli`` keeps
its Temporal imports inside the commands that need them, so file-only
commands such as ``turns validate`` start quickly and work without a server.
"""
