"""The OpenAI-compatible surface: agents as models, chat completions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fim.server import chat_bodies
from fim.server import responses as r
from fim.server.area import Area, Op, get, post

if TYPE_CHECKING:
    from fim.server.api import Api


def _handlers(api: Api) -> dict[str, Any]:
    # deferred: loading fim.server.openai_compat costs tens of ms
    from fim.server.openai_compat import OpenAICompat

    compat = OpenAICompat(api)
    return {
        "models": compat.models,
        "model": compat.model,
        "chat_completions": compat.chat_completions,
    }


AREA = Area(
    "openai_compat",
    (
        # OpenAI's clients add query parameters of their own (`default_query`, Azure's
        # `api-version`): ignored here, as OpenAI's API ignores them
        get(
            "/v1/models",
            "models",
            Op("OpenAI-compatible: agents as models", "openai", r.ModelList),
            extra_query=True,
        ),
        get(
            "/v1/models/{model_id:path}",
            "model",
            Op("OpenAI-compatible: one agent as a model", "openai", r.ModelObject, errors=(404,)),
            extra_query=True,
        ),
        post(
            "/v1/chat/completions",
            "chat_completions",
            Op(
                "OpenAI-compatible chat completions",
                "openai",
                r.ChatCompletion,
                chat_bodies.ChatBody,
                stream="with `stream: true`: OpenAI `chat.completion.chunk` events",
                errors=(400, 404, 500, 503),
                runs=True,
            ),
            extra_query=True,
        ),
    ),
    _handlers,
)
