"""`GET /v1/sessions` (the caller's sessions by name, the most recent first) and `GET` /
`DELETE /v1/sessions/{session_id}` (read or forget one). A session is the caller's own by
construction (each key names its own, `fim.run.sessions`), so another key's is simply
not there (404)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fim.run.sessions import SCOPED, session_key
from fim.server.http import JSONResponse, error, session_owner
from fim.server.queries import SessionsQuery, read_query
from fim.server.sessions import UnknownSession, find_session

if TYPE_CHECKING:
    from fim.server.api import Api


def session_handlers(api: Api) -> dict[str, Any]:
    """The handlers of the `sessions` area (`fim.server.areas.sessions`)."""

    async def found(request: Request) -> tuple[str, str, Any] | Response:
        name = request.path_params["session_id"]
        if len(name) > 200:
            return error(400, "session_id: at most 200 characters", param="session_id")
        owner = session_owner(request)
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
        name, owner, _ = session
        key = session_key(owner, name)
        await api.session_store.delete(key, owner)
        if key != name:  # an older fim's copy under the plain name goes too, or it returns
            await api.session_store.delete(name, owner)
        return JSONResponse({"session_id": name, "deleted": True})

    async def list_sessions(request: Request) -> Response:
        query = read_query(request, SessionsQuery)
        if isinstance(query, Response):
            return query
        owner = session_owner(request)
        rows = await api.session_store.owned(owner, query.limit)
        listed = [
            {"session_id": name or key, "updated_at": updated}
            for name, key, updated in rows
            if name or not key.startswith(SCOPED)  # a key's session stored before names
        ]
        return JSONResponse({"sessions": listed})

    async def session(request: Request) -> Response:
        if request.method == "DELETE":
            return await delete_session(request)
        return await get_session(request)

    return {"session": session, "list_sessions": list_sessions}
