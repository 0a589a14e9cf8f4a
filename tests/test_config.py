"""``turns.toml``: layering over the built-ins, and every mistake named by its key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from turnclient.runtime.config import BUILTIN_AGENTS, ConfigError, load_config
from turnclient.runtime.connection import RuleClassifier, Runtime
from turncore.errors import DependencyError
from turncore.events import RequestedAgent
from turncore.permissions import PermissionClassificationBatch, PermissionClassificationInput
from turncore.tools import ToolContext


def write(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "turns.toml").write_text(textwrap.dedent(text))
    return home


def test_no_file_means_the_built_ins(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.source is None
    assert config.default_agent == "demo"
    assert config.default_model is None
    assert config.task_queue == "turns"
    assert config.workspace == tmp_path / "workspace"
    assert set(config.agents) == set(BUILTIN_AGENTS) == {"demo", "assistant"}
    assert config.agents["demo"].model == "scripted/demo"
    assert set(config.tools) == {
        "clock",
        "calculator",
        "read_file",
        "list_dir",
        "write_file",
        "http_get",
        "ask_human",
    }
    permissions = {n: t.permission for n, t in config.tools.items()}
    assert permissions["write_file"] == permissions["http_get"] == "ask"
    assert permissions["read_file"] == permissions["clock"] == "none"
    ask = config.tools["ask_human"]
    assert (ask.execution, ask.requires_human, ask.tool_id) == ("async", True, "builtin:ask_human")


def test_a_full_file_layers_over_the_built_ins(tmp_path: Path) -> None:
    (tmp_path / "mytools_full.py").write_text("def word_count(text: str) -> int:\n    return 1\n")
    write(
        tmp_path,
        """
        default_agent = "coder"
        default_model = "openai/gpt-4.1"
        workspace = "/srv/project"
        task_queue = "my-turns"

        [providers.openai]
        kind = "openai-responses"
        api_key_env = "OPENAI_API_KEY"

        [providers.local]
        kind = "openai-chat"
        base_url = "http://127.0.0.1:11434/v1"

        [agents.coder]
        system_prompt = "You write code."
        model = "local/qwen3:8b"
        tools = ["read_file", "deploy", "word_count"]
        reasoning_effort = "high"

        [agents.demo]
        tools = ["clock"]

        [tools.deploy]
        execution = "async"
        description = "Deploy; CI reports back."
        input_schema = { type = "object", properties = { env = { type = "string" } } }

        [tools.word_count]
        execution = "sync"
        callable = "mytools_full:word_count"
        permission = "none"

        [tools.write_file]
        permission = "none"

        [permissions]
        allow = ["write_file"]
        deny = ["http_get"]

        [context]
        elide_historic_tool_results_threshold_chars = 100
        """,
    )
    config = load_config(tmp_path, env={"TURNS_TASK_QUEUE": "from-env"})
    assert config.default_agent == "coder"
    assert config.default_model == "openai/gpt-4.1"
    assert config.workspace == Path("/srv/project")
    assert config.task_queue == "from-env"  # the environment wins over the file
    coder = config.agents["coder"]
    assert (coder.model, coder.tools, coder.reasoning_effort) == (
        "local/qwen3:8b",
        ("read_file", "deploy", "word_count"),
        "high",
    )
    demo = config.agents["demo"]
    assert demo.tools == ("clock",) and demo.model == "scripted/demo"  # other keys kept
    assert config.agents["assistant"] == BUILTIN_AGENTS["assistant"]
    deploy = config.tools["deploy"]
    assert (deploy.tool_id, deploy.permission, deploy.requires_human) == (
        "external:deploy",
        "ask",  # undeclared permission fails closed
        False,
    )
    assert config.tools["word_count"].tool_id == "user:word_count"
    assert config.tools["write_file"].permission == "none"
    assert config.tools["write_file"].tool_id == "builtin:write_file"
    assert config.providers["local"].base_url == "http://127.0.0.1:11434/v1"
    assert (config.auto_allow, config.auto_deny) == (("write_file",), ("http_get",))
    assert config.context.elide_historic_tool_results_threshold_chars == 100


@pytest.mark.parametrize(
    "text, message",
    [
        ("defualt_agent = 'x'", "turns.toml: unknown key defualt_agent"),
        ("default_agent = 'nobody'", "default_agent 'nobody' is not an agent"),
        ("default_model = 'gpt-4'", "a model reference is PROVIDER/MODEL"),
        ("default_model = 'acme/gpt-4'", "provider 'acme' is not configured"),
        ("[agents.x]\nmodel = 'scripted/demo'", "agents.x needs a system_prompt"),
        (
            "[agents.x]\nsystem_prompt = 's'\ntools = ['bash']",
            "agents.x.tools: unknown tool 'bash'",
        ),
        ("[agents.x]\nsystem_prompt = 's'\ntools = 'clock'", "agents.x.tools must be a list"),
        ("[agents.x]\nsystem_prompt = 's'\nreasoning_effort = 'max'", "reasoning_effort must be"),
        ("[agents.x]\nsystem_prompt = 's'\ntemperature = 1", "agents.x: unknown key temperature"),
        ("[tools.t]\ndescription = 'd'", 'tools.t.execution must be "sync" or "async"'),
        ("[tools.t]\nexecution = 'sync'", 'a sync tool needs callable = "module:function"'),
        ("[tools.t]\nexecution = 'async'\ncallable = 'm:f'", "an async tool has no callable"),
        ("[tools.t]\nexecution = 'async'\npermission = 'maybe'", "permission must be"),
        ("[tools.'a b']\nexecution = 'async'", "a tool name is 1-64 letters"),
        ("[tools.read_file]\nexecution = 'async'", "read_file is a built-in tool"),
        ("[providers.p]\nkind = 'openai-chat'\napi_key = 'sk-1'", "API keys are never written"),
        ("[providers.p]\nkind = 'grpc'", "unknown provider kind 'grpc'"),
        ("[permissions]\nallow = ['nope']", "permissions.allow: unknown tool 'nope'"),
        ("[context]\nelide_everything = true", "context:"),
        ("[context]\nelide_everything = true", "context: unknown key elide_everything"),
        (
            "[tools.t]\nexecution = 'async'\nrequires_human = 'yes'",
            "tools.t.requires_human must be a boolean",
        ),
        (
            "[agents.x]\nsystem_prompt = 's'\ntools = ['clock', 3]",
            "agents.x.tools[1] must be a string",
        ),
        ("[permissions]\nallow = ['clock']\nask = []", "permissions: unknown key ask"),
        (
            "[context]\nelide_historic_images = 'no'",
            "context.elide_historic_images must be a boolean",
        ),
        ("this is not toml", "is not valid TOML"),
    ],
)
def test_mistakes_are_named(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")) as info:
        load_config(tmp_path)
    assert str(tmp_path / "turns.toml") in str(info.value)
    assert isinstance(info.value, DependencyError)


def test_every_mistake_in_the_file_is_named_at_once_each_with_its_key_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "turns.toml"
    write(
        tmp_path,
        "bogus = 1\nother = 2\ndefault_agent = 3\n[agents.a]\nmodel = 5\ntools = 5\nnope = 1\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    problems = str(info.value).removeprefix(f"{path}: ").split("; ")
    assert [p.split(" (known: ")[0] for p in problems] == [
        "default_agent must be a string",
        "agents.a.model must be a string or a list",  # a union: one problem, every type
        "agents.a.tools must be a list",
        "agents.a: unknown key nope",
        "unknown keys bogus, other",
    ]
    assert "system_prompt, tools)" in problems[3] and "(known: agents, " in problems[4]
    assert str(info.value).count("turns.toml") == 1  # the file is named once
    # A file of the right shape: every broken reference, then every unloadable tool.
    write(
        tmp_path,
        "default_agent = 'nosuch'\n[agents.a]\nmodel = 'nope/x'\ntools = ['zzz']\n"
        "[permissions]\nallow = ['yyy']\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    message = str(info.value)
    for part in (
        "agents.a needs a system_prompt",
        "agents.a.tools: unknown tool 'zzz'",
        "agents.a.model: provider 'nope' is not configured",
        "default_agent 'nosuch' is not an agent",
        "permissions.allow: unknown tool 'yyy'",
    ):
        assert message.count(part) == 1, (part, message)
    write(tmp_path, "[tools.t]\ncallable = 'nosuchmod:fn'\n[tools.u]\ncallable = 'nosuchmod2:fn'\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert "tools.t: cannot load nosuchmod:fn" in str(info.value)
    assert "tools.u: cannot load nosuchmod2:fn" in str(info.value)


def test_the_runtime_wires_user_tools_agents_and_the_classifier(tmp_path: Path) -> None:
    (tmp_path / "mytools_cfgtest.py").write_text(
        "def word_count(text: str) -> dict[str, int]:\n    return {'words': len(text.split())}\n"
    )
    write(
        tmp_path,
        """
        [agents.counter]
        system_prompt = "Count."
        model = "scripted/demo"
        tools = ["word_count", "deploy", "clock"]

        [tools.word_count]
        execution = "sync"
        callable = "mytools_cfgtest:word_count"
        permission = "none"

        [tools.deploy]
        execution = "async"

        [permissions]
        allow = ["clock"]
        deny = ["deploy"]
        """,
    )
    runtime = Runtime.from_work_dir(tmp_path, env={})
    resolved = runtime.resolver.resolve(RequestedAgent(agent_id="counter"))
    assert [t.tool_id for t in resolved.tools] == [
        "user:word_count",
        "external:deploy",
        "builtin:clock",
    ]
    runtime.tools.check_all(resolved.tools)
    assert runtime.work_dir == tmp_path and (tmp_path / "workspace").is_dir()

    import asyncio

    tool = runtime.tools.sync_tool(resolved.tools[0])
    context = ToolContext("t", "c", asyncio.Event(), lambda p: asyncio.sleep(0))
    result = asyncio.run(tool.execute({"text": "one two three"}, context))
    assert result.output == {"words": 3} and not result.is_error

    assert isinstance(runtime.deps.classifier, RuleClassifier)
    batch = PermissionClassificationBatch(
        turn_id="t",
        messages=[],
        requests=[
            PermissionClassificationInput(tool_call_id=c, tool_name=n, input={}, request=None)
            for c, n in (("a", "clock"), ("b", "deploy"), ("c", "word_count"))
        ],
    )
    decisions = asyncio.run(runtime.deps.classifier.classify(batch))
    assert [d.decision for d in decisions] == ["allow", "deny", "defer"]


def test_a_callable_that_cannot_be_imported_is_a_config_error(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        [tools.t]
        execution = "sync"
        callable = "no_such_module_here:f"
        """,
    )
    with pytest.raises(ConfigError, match="tools.t: cannot load no_such_module_here:f"):
        Runtime.from_work_dir(tmp_path, env={})


def test_an_agent_without_a_model_needs_the_default(tmp_path: Path) -> None:
    runtime = Runtime.from_work_dir(tmp_path, env={})
    with pytest.raises(DependencyError, match="names no model"):
        runtime.resolver.resolve(RequestedAgent(agent_id="assistant"))
    assert runtime.model_for("assistant", None) is None
    assert runtime.model_for("assistant", "scripted/demo") is not None


def test_turns_config_names_the_file(tmp_path: Path) -> None:
    elsewhere = write(tmp_path / "etc", "default_agent = 'assistant'\n") / "turns.toml"
    config = load_config(tmp_path / "home", env={"TURNS_CONFIG": str(elsewhere)})
    assert (config.source, config.default_agent) == (elsewhere, "assistant")
    assert config.work_dir == tmp_path / "home"
    with pytest.raises(ConfigError, match="TURNS_CONFIG names .* which is not a file"):
        load_config(tmp_path / "home", env={"TURNS_CONFIG": str(tmp_path / "missing.toml")})


def test_a_scripted_provider_plays_a_json_script_from_the_work_dir(tmp_path: Path) -> None:
    import orjson

    from turncore.events import ModelDescriptor
    from turncore.model import ScriptedModel

    (tmp_path / "script.json").write_bytes(
        orjson.dumps(
            {
                "responses": [
                    {"toolCalls": [{"toolName": "clock", "input": {}}], "text": "checking"},
                    {"text": "done"},
                    {"error": "gone"},
                ]
            }
        )
    )
    write(
        tmp_path,
        """
        [providers.play]
        kind = "scripted"
        delay = 0.01

        [agents.player]
        system_prompt = "Play."
        model = "play/script.json"
        tools = ["clock"]
        """,
    )
    runtime = Runtime.from_work_dir(tmp_path, env={})
    model = runtime.models.resolve(ModelDescriptor(provider="play", model="script.json"))
    assert isinstance(model, ScriptedModel)
    assert runtime.model_for("player", None) == ModelDescriptor(
        provider="play", model="script.json"
    )
    with pytest.raises(DependencyError, match="neither a registered function nor a script file"):
        runtime.models.resolve(ModelDescriptor(provider="play", model="missing.json"))


def test_any_agent_may_list_spawn_agent(tmp_path: Path) -> None:
    write(
        tmp_path,
        """
        [agents.lead]
        system_prompt = "Delegate."
        model = "scripted/demo"
        tools = ["spawn_agent", "clock"]
        """,
    )
    runtime = Runtime.from_work_dir(tmp_path, env={})
    resolved = runtime.resolver.resolve(RequestedAgent(agent_id="lead"))
    assert [t.tool_id for t in resolved.tools] == ["workflow:spawn_agent", "builtin:clock"]
    runtime.tools.check_all(resolved.tools)  # implemented by the workflow itself
    assert runtime.deps.agents is runtime.resolver and runtime.deps.ids is not None


def test_a_callable_is_a_typed_tool_whose_schema_is_inferred_and_checked(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "typed_cfgtools.py").write_text(
        textwrap.dedent(
            '''
            from typing import Literal
            from turncore.tools import tool

            def greet(name: str, tone: Literal["warm", "dry"] = "warm") -> str:
                """Greet someone.

                Args:
                    name: who
                """
                return f"hello {name}"

            @tool(permission="none", requires_human=True)
            def declared(n: int) -> int:
                """Declared next to the function."""
                return n
            '''
        )
    )
    write(
        tmp_path,
        """
        [tools.greet]
        callable = "typed_cfgtools:greet"
        input_schema = { type = "object", required = ["name"] }

        [tools.declared]
        callable = "typed_cfgtools:declared"
        """,
    )
    config = load_config(tmp_path)
    greet = config.tools["greet"]
    assert (greet.tool_id, greet.execution, greet.permission) == ("user:greet", "sync", "ask")
    assert greet.description == "Greet someone."
    assert greet.input_schema["properties"]["name"] == {"type": "string", "description": "who"}
    assert greet.input_schema["properties"]["tone"]["enum"] == ["warm", "dry"]
    declared = config.tools["declared"]
    assert (declared.permission, declared.requires_human) == ("none", True)

    write(
        tmp_path,
        """
        [tools.greet]
        callable = "typed_cfgtools:greet"
        input_schema = { type = "object", properties = { name = { type = "integer" } } }
        """,
    )
    with pytest.raises(
        ConfigError,
        match="tools.greet: input_schema.properties.name.type is 'integer' but the function "
        "gives 'string'",
    ):
        load_config(tmp_path)


def test_an_untyped_callable_is_refused_by_name(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "untyped_cfgtools.py").write_text("def f(x):\n    return x\n")
    write(tmp_path, '[tools.f]\ncallable = "untyped_cfgtools:f"\n')
    with pytest.raises(
        ConfigError, match="tools.f: untyped_cfgtools:f: .*'x' .* has no type annotation"
    ):
        load_config(tmp_path)
