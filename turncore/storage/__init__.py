"""Turn storage: the repository port and the JSONL file and in-memory
repositories (``repository``), and the PostgreSQL repository (``postgres``,
which needs the ``postgres`` extra). Nothing is imported here, so reading a
file never loads psycopg."""
