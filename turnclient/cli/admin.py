"""Commands that look after files, storage and configuration: ``repair``,
``db``, ``export``, ``import``, ``config``, ``mcp``, ``completion``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnclient.cli.common import (
    COMMANDS,
    EXIT_OK,
    EXIT_USAGE,
    JSON,
    PROG,
    Failure,
    arg,
    command,
    command_line,
    current_work_dir,
    emit_json,
    in_database,
    path_of,
    run_async,
    run_sync,
    storage_config,
    stored_repository,
    stored_turn_ids,
    turn_files,
)
from turnclient.cli.main import build_parser
from turncore.errors import CorruptTurnError
from turncore.ids import is_turn_id, turn_path, validate_turn_id

if TYPE_CHECKING:
    from turnclient.runtime.config import Config


def _recover_hint(path: Path) -> str:
    """How to continue a repaired turn, only when ``path`` is that turn's file in this work dir."""
    turn_id = path.name.removesuffix(".jsonl")
    if is_turn_id(turn_id) and turn_path(current_work_dir(), turn_id).absolute() == path.absolute():
        return f"; continue with: {command_line('recover', turn_id)}"
    return (
        f" (this is not {current_work_dir()}'s copy of the turn: `{PROG} recover` continues turns of "
        "the work dir only)"
    )


@command(
    "repair",
    "move a torn final line into <file>.broken (refuses any other damage)",
    arg("turn", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    JSON,
)
def repair(args: argparse.Namespace) -> int:
    from turncore.storage.repository import (
        NothingToRepairError,
        RepairRefusedError,
        repair_torn_tail,
    )

    def body() -> int:
        if in_database(args.turn):
            return _repair_stored(args)
        path = path_of(args.turn)
        try:
            report = repair_torn_tail(path)
        except NothingToRepairError:
            if args.json:
                emit_json({"status": "healthy", "path": str(path)})
            else:
                print(f"{path} is healthy: every line is whole and valid; nothing to repair")
            return EXIT_OK
        except RepairRefusedError as exc:
            raise Failure(f"not repaired: {exc}") from None
        _print_repair(
            args, report, str(report.path), str(report.sidecar), _recover_hint(report.path)
        )
        return EXIT_OK

    return run_sync(args, body)


def _print_repair(
    args: argparse.Namespace, report: Any, where: str, sidecar: str, hint: str
) -> None:
    """What a repair removed and where it went, for people or (``--json``) programs."""
    if args.json:
        emit_json(
            {
                "status": "repaired",
                "path": where,
                "sidecar": sidecar,
                "line": report.line,
                "removedBytes": report.removed_bytes,
                "preview": report.preview(),
                "keptLines": report.kept_lines,
            }
        )
        return
    print(
        f"removed {report.removed_bytes} bytes (line {report.line}) from {where}\n"
        f"  moved to {sidecar}\n"
        f"  they were: {report.preview()}\n"
        f"  {report.kept_lines} valid lines remain{hint}"
    )


def _repair_stored(args: argparse.Namespace) -> int:
    from turncore.storage.repository import RepairRefusedError

    with stored_repository() as repo:
        try:
            report = repo.repair_tail(args.turn)
        except RepairRefusedError as exc:
            raise Failure(f"not repaired: {exc}") from None
    hint = f"; continue with: {command_line('recover', args.turn)}"
    _print_repair(args, report, report.where, "turn_events_broken", hint)
    return EXIT_OK


def _storage_summary(cfg: Config) -> dict[str, Any]:
    """``turns config``'s storage: the kind, and for PostgreSQL the variable and whether it is set."""
    storage = cfg.storage
    if storage.kind == "file":
        return {"kind": "file"}
    return {
        "kind": "postgres",
        "urlEnv": storage.url_env,
        "urlSet": bool(os.environ.get(storage.url_env)),
        "poolSize": storage.pool_size,
    }


def _storage_line(doc: dict[str, Any]) -> str:
    if doc["kind"] == "file":
        return "files under the work dir"
    state = "set" if doc["urlSet"] else "NOT SET"
    return f"PostgreSQL from {doc['urlEnv']} ({state}) · pool {doc['poolSize']}"


@command(
    "db",
    "the turn database: `migrate` creates or upgrades its schema, "
    "`validate` checks every stored turn",
    arg("action", choices=["migrate", "validate"]),
    JSON,
)
def db(args: argparse.Namespace) -> int:
    def body() -> int:
        from turnclient.runtime.storage import migrate_database, where

        cfg = storage_config()
        if args.action == "migrate":
            before, after = migrate_database(cfg)
            if args.json:
                emit_json({"status": "migrated", "from": before, "to": after})
            elif before == after:
                print(f"{where(cfg)}: the turn schema is at version {after}; nothing to do")
            else:
                print(f"{where(cfg)}: migrated the turn schema from version {before} to {after}")
            return EXIT_OK
        valid: list[str] = []
        invalid: list[dict[str, str]] = []
        with stored_repository() as repo:
            for turn_id in repo.turn_ids():
                try:
                    repo.read(turn_id)
                    valid.append(turn_id)
                except CorruptTurnError as exc:
                    problem = f"{exc.path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
                    invalid.append({"turnId": turn_id, "problem": problem})
                    if not args.json:
                        print(problem)
        if args.json:
            emit_json({"valid": valid, "invalid": invalid})
        elif not invalid:
            print(f"{len(valid)} turns in {where(cfg)} are valid")
        return 1 if invalid else 0

    return run_sync(args, body)


@command(
    "export",
    "copy turns from the configured storage to DIR/<turnId>.jsonl, byte for byte",
    arg("turns", nargs="*", metavar="TURN", help="turn ids (or --all)"),
    arg("--to", required=True, metavar="DIR", help="the directory to write the files to"),
    arg("--all", action="store_true", help="every stored turn"),
    JSON,
)
def export(args: argparse.Namespace) -> int:
    def body() -> int:
        from turnclient.runtime.storage import export_turns, where

        if bool(args.turns) == bool(args.all):
            raise Failure("name the turns to export, or pass --all (not both)", EXIT_USAGE)
        cfg = storage_config()
        with stored_repository() as repo:
            ids = repo.turn_ids() if args.all else [validate_turn_id(t) for t in args.turns]
            for turn_id in ids:
                if not repo.exists(turn_id):
                    raise Failure(f"no turn {turn_id} in {where(cfg)}", EXIT_USAGE)
            moved = export_turns(repo, ids, Path(args.to))
        if args.json:
            emit_json([{"turnId": m.turn_id, "path": m.target, "bytes": m.bytes} for m in moved])
        else:
            for m in moved:
                print(f"{m.turn_id} -> {m.target} ({m.bytes} bytes)")
        return EXIT_OK

    return run_sync(args, body)


@command(
    "import",
    "store turn files in the configured storage as new turns, byte for byte",
    arg("files", nargs="+", metavar="FILE", help="a turn file, or a directory of them"),
    JSON,
)
def import_(args: argparse.Namespace) -> int:
    def body() -> int:
        from turnclient.runtime.storage import import_files, where

        paths = [Path(p) for given in args.files for p in turn_files(given)]
        cfg = storage_config()
        with stored_repository() as repo:
            moved = import_files(repo, paths, where(cfg))
        if args.json:
            emit_json([{"turnId": m.turn_id, "path": m.source, "bytes": m.bytes} for m in moved])
        else:
            for m in moved:
                print(f"{m.source} -> {m.turn_id} ({m.bytes} bytes)")
        return EXIT_OK

    return run_sync(args, body)


@command("config", "show the effective configuration: agents, tools, providers, Temporal", JSON)
def config(args: argparse.Namespace) -> int:
    def body() -> int:
        from turnclient.runtime.config import load_config
        from turnclient.runtime.connection import uses_embedded

        cfg = load_config(current_work_dir())
        origin = cfg.origins.get
        doc = {
            "workDir": str(cfg.work_dir),
            "configFile": str(cfg.source) if cfg.source else None,
            "app": cfg.app,
            "workspace": str(cfg.workspace),
            "taskQueue": cfg.task_queue,
            "temporal": "embedded" if uses_embedded() else os.environ.get("TEMPORAL_ADDRESS"),
            "storage": _storage_summary(cfg),
            "defaultAgent": cfg.default_agent,
            "defaultModel": cfg.default_model,
            "agents": {
                n: {
                    "model": a.model,
                    "tools": list(a.tool_names),
                    "mcp": list(a.mcp_names),
                    "reasoningEffort": a.reasoning_effort,
                    "outputSchema": a.output_schema,
                    "outputRetries": a.output_retries if a.output_schema else None,
                    "origin": origin(f"agents.{n}"),
                }
                for n, a in cfg.agents.items()
            },
            "tools": {
                n: {
                    "toolId": t.tool_id,
                    "execution": t.execution,
                    "permission": t.permission,
                    "requiresHuman": t.requires_human,
                    "origin": origin(f"tools.{n}"),
                }
                for n, t in cfg.tools.items()
            },
            "models": {
                f"scripted/{n}": {"origin": origin(f"models.scripted/{n}")} for n in cfg.models
            },
            "providers": {
                n: {
                    "kind": p.kind,
                    "baseUrl": p.base_url,
                    "apiKeyEnv": p.api_key_env,
                    "apiKeySet": bool(p.api_key_env and os.environ.get(p.api_key_env)),
                    "origin": origin(f"providers.{n}"),
                }
                for n, p in cfg.providers.items()
            },
            "mcp": {n: _mcp_summary(m) for n, m in cfg.mcp.items()},
        }
        if args.json:
            emit_json(doc)
            return EXIT_OK
        print(f"work dir      {doc['workDir']}")
        print(f"turns.toml    {doc['configFile'] or '(none: built-in defaults)'}")
        print(f"app           {cfg.app or '(none: --app, TURNS_APP or app = in turns.toml)'}")
        print(f"workspace     {doc['workspace']}")
        print(f"temporal      {doc['temporal']} · task queue {doc['taskQueue']}")
        print(f"storage       {_storage_line(_storage_summary(cfg))}")
        chosen = f" (from {origin('default_model')})" if doc["defaultModel"] else ""
        print(
            f"default agent {doc['defaultAgent']} · default model {doc['defaultModel'] or '-'}"
            f"{chosen}"
        )
        print("agents")
        for n, a in cfg.agents.items():
            models = " → ".join(a.models) or "(default model)"
            servers = f" · mcp: {', '.join(a.mcp_names)}" if a.mcp else ""
            shaped = a.output
            output = f" · output: {shaped.name} (retries {shaped.retries})" if shaped else ""
            print(
                f"  {n:<12} {models} · tools: {', '.join(a.tool_names) or 'none'}"
                f"{servers}{output} · from {origin(f'agents.{n}') or '?'}"
            )
        print("tools")
        for n, t in cfg.tools.items():
            human = ", needs a human" if t.requires_human else ""
            print(
                f"  {n:<12} {t.tool_id} · {t.execution} · permission {t.permission}{human}"
                f" · from {origin(f'tools.{n}') or '?'}"
            )
        print("providers")
        print("  scripted     built in (demo, or a JSON script file)")
        for name in cfg.models:
            print(
                f"    scripted/{name}  a Python function · from {origin(f'models.scripted/{name}')}"
            )
        for n, p in cfg.providers.items():
            key = ""
            if p.api_key_env:
                state = "set" if os.environ.get(p.api_key_env) else "NOT set"
                key = f" · key ${p.api_key_env} {state}"
            print(
                f"  {n:<12} {p.kind} · {p.base_url or 'default endpoint'}{key}"
                f" · from {origin(f'providers.{n}') or '?'}"
            )
        if cfg.mcp:
            print("mcp servers")
            for n, m in cfg.mcp.items():
                users = [a for a, agent in cfg.agents.items() if n in agent.mcp_names]
                print(f"  {n:<12} {_mcp_line(m)} · agents: {', '.join(users) or 'none'}")
        return EXIT_OK

    return run_sync(args, body)


def _mcp_summary(server: Any) -> dict[str, Any]:
    """A ``[mcp.NAME]`` for ``turns config --json``: variable names, never their values."""
    return {
        "transport": "stdio" if server.command is not None else "http",
        "command": server.command,
        "args": list(server.args),
        "url": server.url,
        "env": list(server.env),
        "headersEnv": dict(server.headers_env),
        "timeout": server.timeout,
        "permission": server.permission,
        "allow": list(server.allow),
        "deny": list(server.deny),
        "prefix": server.prefix,
    }


def _mcp_line(server: Any) -> str:
    bits = [server.where, f"permission {server.permission}", f"timeout {server.timeout:g} s"]
    if server.allow:
        bits.append(f"allow {', '.join(server.allow)}")
    if server.deny:
        bits.append(f"deny {', '.join(server.deny)}")
    if server.prefix:
        bits.append(f"prefix {server.prefix}_")
    return " · ".join(bits)


@command(
    "mcp",
    "list an MCP server's tools as an agent would see them (turns mcp list NAME)",
    arg("action", choices=["list"], help="list: connect, list the tools, print them"),
    arg("server", metavar="NAME", help="a server configured as [mcp.NAME] in turns.toml"),
    JSON,
)
def mcp(args: argparse.Namespace) -> int:
    async def body() -> int:
        import json
        import textwrap

        from turnclient.runtime.config import load_config
        from turnclient.runtime.mcp import descriptors, list_tools
        from turncore.errors import InvalidInputError

        cfg = load_config(current_work_dir())
        server = cfg.mcp.get(args.server)
        if server is None:
            known = ", ".join(sorted(cfg.mcp)) or "none: add an [mcp.NAME] table to turns.toml"
            raise InvalidInputError(f"no MCP server {args.server!r} is configured ({known})")
        listed = await list_tools(server, os.environ)
        advertised = descriptors(server, listed)
        denied = sorted(t.name for t in listed if t.name in server.deny)

        def permission(tool: str) -> str:  # the checker's rule (turnclient.runtime.mcp)
            return "none" if server.permission == "none" or tool in server.allow else "ask"

        rows = [
            {
                "name": d.name,
                "toolId": d.tool_id,
                "permission": permission(d.tool_id.rpartition("/")[2]),
                "description": d.description,
                "inputSchema": d.input_schema,
            }
            for d in advertised
        ]
        if args.json:
            emit_json({"server": server.name, "tools": rows, "denied": denied})
            return EXIT_OK
        print(f"MCP {server.name} · {server.where} · {len(rows)} tools")
        for row in rows:
            print(f"\n{row['name']}  ({row['toolId']} · permission {row['permission']})")
            if row["description"]:
                print(textwrap.indent(str(row["description"]).strip(), "  "))
            schema = json.dumps(row["inputSchema"], indent=2, ensure_ascii=False)
            print(textwrap.indent(schema, "  "))
        if denied:
            print(f"\ndenied (never advertised): {', '.join(denied)}")
        return EXIT_OK

    return run_async(args, body)


@command(
    "completion",
    'print a shell completion script: eval "$(turns completion bash)" (or zsh) in your rc file',
    arg("shell", choices=["bash", "zsh", "ids"], help="bash, zsh (ids: the stored turn ids)"),
)
def completion(args: argparse.Namespace) -> int:
    if args.shell == "ids":  # what the scripts call to complete TURN arguments
        for turn_id in reversed(stored_turn_ids(current_work_dir())):
            print(turn_id)
        return EXIT_OK
    script = _bash_completion(build_parser())
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    sys.stdout.write(script)
    return EXIT_OK


def _bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion function generated from the registered commands and their flags."""
    cases = []
    for c in COMMANDS.values():
        flags = sorted(f for a in c.args for f in a.flags if f.startswith("-"))
        takes_turn = any(a.flags and a.flags[0] in ("turn", "path") for a in c.args)
        cases.append(
            f"    {c.name}) opts={shlex.quote(' '.join(flags + ['--help']))}; turn={int(takes_turn)};;"
        )
    names = " ".join(COMMANDS)
    return f"""# turns completion for bash (generated by `turns completion bash`)
_turns() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" opts="" turn=0
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W "{names} --help --version" -- "$cur") )
    return
  fi
  case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
  elif [ "$turn" -eq 1 ] && [ "$COMP_CWORD" -eq 2 ]; then
    COMPREPLY=( $(compgen -W "last $(turns completion ids 2>/dev/null)" -- "$cur") )
  else
    COMPREPLY=( $(compgen -f -- "$cur") )
  fi
}}
complete -F _turns turns
"""
