"""Images from MCP tool results reach models that accept them, as `image_url` parts of a user
message after the tool results; other models keep the text placeholder. The requests are
read where they arrive: at a real OpenAI-compatible stub server on loopback, called over
HTTP by fim's model client, with the real demo MCP server over stdio."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.llm.media import accepted_media, media_message
from fim.llm.scripted import text, tool_call
from fim.run.services import Services
from fim.testing.model_server import OpenAIStubServer
from tests.mcp_servers.demo import PNG_1PX
from tests.mcp_servers.harness import DEMO

CALL = {"subcommand": "call", "server": "demo", "tool": "image", "parameters": {}}
PNG_B64 = base64.b64encode(PNG_1PX).decode()


def write_project(root: Path, base_url: str) -> Path:
    servers = {"demo": {"command": sys.executable, "args": [str(DEMO)]}}
    (root / "fim.yaml").write_text(json.dumps({"name": "p", "mcp_servers": servers}))
    (root / "agents").mkdir()
    models = {
        # litellm's table: gpt-4o has supports_vision, gpt-3.5-turbo does not
        "seer": {"model": "openai/gpt-4o", "api_base": base_url, "api_key": "k"},
        "blind": {"model": "openai/gpt-3.5-turbo", "api_base": base_url, "api_key": "k"},
        # a model the table does not know, declared to accept images
        "local": {"model": "openai/my-vlm", "api_base": base_url, "media": ["image"]},
    }
    for name, model in models.items():
        body = f"instructions: Look.\nmodel: {json.dumps(model)}\nmcp: [demo]\n"
        (root / "agents" / f"{name}.yaml").write_text(textwrap.dedent(body))
    return root


def image_parts(message: dict) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


async def test_images_reach_vision_models_and_placeholders_reach_the_others(tmp_path: Path):
    from fim.run.agent import run_agent

    steps = [tool_call("mcp", CALL), text("a pixel")] * 3
    with OpenAIStubServer(steps) as stub:
        snapshot = compile_project(write_project(tmp_path, stub.base_url))
        services = Services(
            providers=CAPABILITIES, root=tmp_path, state_url=f"sqlite:///{tmp_path}/s.db"
        )
        try:
            for agent in ("seer", "blind", "local"):
                events = [e async for e in run_agent(snapshot, agent, "look", services=services)]
                assert events[-1].status == "ok", events[-1]
        finally:
            await services.aclose()
        seer, blind, local = (stub.requests[i].messages for i in (1, 3, 5))

    for messages in (seer, local):
        tool, after = messages[-2], messages[-1]
        assert (
            tool["role"] == "tool"
            and f"[image: image/png, {len(PNG_1PX)} bytes]" in tool["content"]
        )
        assert after["role"] == "user"
        assert image_parts(after) == [f"data:image/png;base64,{PNG_B64}"]
        assert "images returned by the tool call(s) above: mcp" in after["content"][0]["text"]
    assert blind[-1]["role"] == "tool"
    assert blind[-1]["content"] == f"a pixel\n[image: image/png, {len(PNG_1PX)} bytes]"
    assert not any(image_parts(m) for m in blind)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "image", "mime_type": "image/png", "data": base64.b64encode(b"GIF89a..").decode()},
        {"type": "image", "mime_type": "image/svg+xml", "data": PNG_B64},
        {"type": "image", "mime_type": "image/png", "data": PNG_B64[:-4] + "!!!!"},
        {"type": "image", "mime_type": "image/png", "data": PNG_B64 + "A" * 5_000_000},
        {"type": "video", "mime_type": "image/png", "data": PNG_B64},
        "not an item",
    ],
)
async def test_hostile_media_never_reaches_the_model(item: object):
    assert media_message([("t", [item])], frozenset({"image", "audio"})) is None


async def test_media_the_model_does_not_take_and_turn_caps():
    image = {"type": "image", "mime_type": "image/png", "data": PNG_B64}
    assert media_message([("t", [image])], frozenset({"audio"})) is None
    many = media_message([("t", [image] * 20)], frozenset({"image"}))
    assert many is not None and len(many.images) == 8


async def test_what_a_model_accepts_comes_from_its_settings_or_the_table():
    from fim.config.schema import ModelSettings
    from fim.llm.openai_compat import OpenAICompatModel
    from fim.llm.scripted import ScriptedModel

    def model(**settings: object) -> OpenAICompatModel:
        return OpenAICompatModel(ModelSettings(api_base="http://127.0.0.1:9/v1", **settings))

    assert accepted_media(model(model="openai/gpt-4o")) == {"image"}
    assert accepted_media(model(model="openai/gpt-4o", media=[])) == frozenset()
    assert accepted_media(model(model="openai/x", media=["audio"])) == {"audio"}
    assert accepted_media(ScriptedModel([])) == frozenset()
