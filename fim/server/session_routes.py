"""`GET` and `DELETE /v1/sessions/{session_id}`: read or forget one of the caller's
conversations. A session is the caller's own by construction (each key names its own,
`fim.run.sessions`), so another key's is simply not there (404)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.run.sessions import session_key
from fim.server.http import JSONResponse, error, session_owner
from fim.server.sessions import UnknownSession, find_session

if TYPE_CHECKING:
    from fim.server.api import Api


def session_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `sessions` area (`fim.server.areas.sessions`)."""

    async def found(request: Request) -> tuple[str, str, Any] | Response:
        name = request.path_params["session_id"]
        if len(name) > 200:
            return error(400, "session_id: at most 200 characters", param="session_id")
        owner = session_owner(request, api.holder)
        try:
            session = await find_session(api.session_store, owner, name)
        except UnknownSession as exc:
            return error(404, exc.message)
        if session is None:
            return error(404, f"unknown session '{name}'")
        return name, owner, session

    async def get_session(request: Request) -> Response:
        session = await found(request)
        if isinstance(session, Response):
            return session
        name, _owner, (_key, messages) = session
        dumped = [m.model_dump(mode="json", exclude_defaults=True) for m in messages]
        return JSONResponse({"session_id": name, "messages": dumped})

    async def delete_session(request: Request) -> Response:
        session = await found(request)
        if isinstance(session, Response):
            return session
        name, owner, (key, _messages) = session
        await api.session_store.delete(key, owner)
        if key != session_key(owner, name):  # kept under its plain name: the newer one too
            await api.session_store.delete(session_key(owner, name), owner)
        return JSONResponse({"session_id": name, "deleted": True})

    async def session(request: Request) -> Response:
        if request.method == "DELETE":
            return await delete_session(request)
        return await get_session(request)

    return {"session": session}
