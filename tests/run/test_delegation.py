"""Delegation: `call_agent`, the auto agent, parallel delegation, hooks in delegates, depth."""

from __future__ import annotations

from pathlib import Path

from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.config.schema import AgentDecl, HookSpec, ModelSettings, Project
from fim.events import ToolResultEvent
from fim.run.agent import ask
from fim.run.delegation import auto_agent, provide
from fim.run.services import RunContext, Services
from fim.testing.model_server import OpenAIStubServer
from fim.testing.runs import run_events


def write(root: Path, name: str, body: str) -> str:
    (root / name).write_text(body)
    return f"scripted:{name}"


def snapshot(root: Path, agents: list[AgentDecl], **project: object) -> Snapshot:
    settings = Project(name="team", state=f"sqlite:///{root / 'state.db'}", **project)
    return Snapshot(root=root, project=settings, agents={a.name: a for a in agents})


def test_only_agents_that_list_delegates_get_call_agent(tmp_path: Path):
    solo = AgentDecl(name="solo")
    lead = AgentDecl(name="lead", delegates=["solo", "lead", "ghost"])
    snap = snapshot(tmp_path, [solo, lead])
    services = Services(providers=CAPABILITIES)
    assert provide(RunContext(snapshot=snap, agent=solo, services=services)) is None
    provision = provide(RunContext(snapshot=snap, agent=lead, services=services))
    assert provision is not None
    (tool,) = provision.tools
    assert tool.parameters["properties"]["agent"]["enum"] == ["solo"]  # never itself
    auto = auto_agent(snap)
    assert auto.delegates == ["lead", "solo"] and auto.name == "auto"


async def test_auto_delegates_to_two_agents_in_parallel(tmp_path: Path):
    def answer(request: dict) -> str:
        system = request["messages"][0]["content"]
        return "Invoice 7 is paid." if "billing" in system else "Reset the router."

    with OpenAIStubServer(handler=answer) as stub:
        general = ModelSettings(
            model="openai/stub", api_base=stub.base_url, api_key="x", max_retries=0
        )
        billing = AgentDecl(
            name="billing",
            description="Invoices and payments",
            instructions="You are billing.",
            model=general,
        )
        tech = AgentDecl(
            name="tech",
            description="Technical support",
            instructions="You are tech support.",
            model=general,
        )
        script = write(
            tmp_path,
            "auto.yaml",
            """\
- tool_calls:
    - {name: call_agent, arguments: {agent: billing, task: "Is invoice 7 paid?"}}
    - {name: call_agent, arguments: {agent: tech, task: "Internet is down"}}
- text: "Invoice 7 is paid, and please reset the router."
""",
        )
        snap = snapshot(tmp_path, [billing, tech], models={"general": script})
        snap = Snapshot(
            root=snap.root,
            project=snap.project,
            agents=snap.agents,
            models={"general": ModelSettings(model=script)},
        )
        # The two delegates' model calls are held until both are in flight: delegates run
        # one after the other would never meet, and each would get an HTTP 504.
        stub.gather_next(2)
        events = await run_events(snap, "auto", "Invoice 7 and my internet?")
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert sorted(r.content for r in results) == ["Invoice 7 is paid.", "Reset the router."]
    assert events[-1].output == "Invoice 7 is paid, and please reset the router."


async def test_delegated_agents_run_their_own_hooks(tmp_path: Path):
    worker = AgentDecl(
        name="worker",
        tools=["calculator"],
        model=write(
            tmp_path,
            "worker.yaml",
            """\
- tool_calls: [{name: calculator, arguments: {expression: "2+3"}}]
- text: "five"
""",
        ),
        hooks=[HookSpec.model_validate({"use": "audit_log"})],
    )
    lead = AgentDecl(
        name="lead",
        delegates=["worker"],
        model=write(
            tmp_path,
            "lead.yaml",
            """\
- tool_calls: [{name: call_agent, arguments: {agent: worker, task: "add 2 and 3"}}]
- text: "The worker says five."
""",
        ),
    )
    snap = snapshot(tmp_path, [worker, lead])
    services = Services(providers=CAPABILITIES, root=tmp_path, state_url=snap.project.state)
    final = await ask(snap, "lead", "what is 2+3?", services=services)
    from fim.store import get_store

    entries = await get_store(services).list_audit()
    await services.aclose()
    assert final.output == "The worker says five."
    assert [(e.agent, e.tool) for e in entries] == [("worker", "calculator")]


async def test_the_depth_cap_stops_runaway_delegation(tmp_path: Path):
    c = AgentDecl(name="c", model=write(tmp_path, "c.yaml", '- text: "c"\n'))
    b = AgentDecl(
        name="b",
        delegates=["c"],
        model=write(
            tmp_path,
            "b.yaml",
            """\
- tool_calls: [{name: call_agent, arguments: {agent: c, task: "go"}}]
- text: "b done"
""",
        ),
    )
    snap = snapshot(tmp_path, [b, c], max_depth=1)
    events = await run_events(snap, "b", "go", depth=1)
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.is_error and "max_depth 1" in result.content
