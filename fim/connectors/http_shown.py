"""An HTTP connector call as a person debugging it reads it (newcomer-53 #10): the origin
a call could not reach, and the method, URL and status of each call on its `tool_result`
event (`http`), its `execute_tool` span and `fim run -v`.

What is shown never carries a credential: no user-info, every query value masked (a key
in the query, `?api_key=...`, is the connector's own or the model's, and neither belongs
in a trace), and what remains passes through the connector's mask too.
"""

from __future__ import annotations

from typing import Any

MASKED = "***"


def origin(url: Any) -> str:
    """`http://127.0.0.1:8081`: the scheme, host and port (when written) of an httpx URL,
    without user-info, path or query."""
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}"


def shown_url(url: Any) -> str:
    """An httpx URL without user-info, each query value `***`, and no fragment."""
    query = "&".join(f"{name}={MASKED}" for name, _ in url.params.multi_items())
    return f"{origin(url)}{url.raw_path.decode('ascii', 'replace').partition('?')[0]}" + (
        f"?{query}" if query else ""
    )


def http_facts(method: str, url: Any, status: int | None) -> dict[str, Any]:
    """The `http` of a connector call's `tool_result` event: `{method, url, status}`,
    `status` None when no response came (unreachable, timed out)."""
    return {"method": method, "url": shown_url(url), "status": status}


__all__ = ["MASKED", "http_facts", "origin", "shown_url"]
