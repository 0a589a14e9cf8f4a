"""Code that runs inside workers: the built-in tools (``tools``) and the demo
model (``demo``), named in ``turns.toml`` as ``builtin:…`` tools and the
``demo`` model."""
