"""Attack-42 F2: another site's page may open the server's pages, never its API.

On a `fim serve` without keys, a link, a hidden frame or a window another site opens to
`GET /v1/agents/{name}/prompt` was let through as "opening a page", and building the prompt
report starts the agent's stdio MCP servers: any site could run an MCP command on the
developer's machine. The pages (`/`, `/docs`, `/static/...`) still open from anywhere; an
API route navigated to from another site is refused like every other request that site's
page makes; an address typed or pasted (`Sec-Fetch-Site: none`) and plain clients go on.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server.test_server_cross_site import serve, write_project

LINK = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
FRAME = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}
SAME_SITE = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"}
TYPED = {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}


@pytest.mark.parametrize("navigation", [LINK, FRAME, SAME_SITE], ids=["link", "frame", "same-site"])
def test_another_sites_navigation_to_an_api_route_is_refused(
    tmp_path: Path, navigation: dict[str, str]
) -> None:
    with serve(write_project(tmp_path)) as srv:
        for path in ("/v1/agents/a/prompt", "/v1/runs", "/v1/status", "/v1/agents"):
            refused = httpx.get(f"{srv.url}{path}", headers=navigation)
            assert refused.status_code == 403, path
            assert "another site's web page" in refused.json()["error"]["message"]


def test_the_pages_open_from_anywhere_and_a_typed_address_opens_the_api(tmp_path: Path) -> None:
    with serve(write_project(tmp_path)) as srv:
        for path in ("/", "/docs", "/static/app.js", "/favicon.ico", "/openapi.json"):
            assert httpx.get(f"{srv.url}{path}", headers=LINK).status_code == 200, path
        for headers in (TYPED, {}):  # the address bar, a bookmark; curl and SDKs
            assert httpx.get(f"{srv.url}/v1/agents/a/prompt", headers=headers).status_code == 200
        own = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"}
        assert httpx.get(f"{srv.url}/v1/runs", headers=own).status_code == 200


def test_a_keyed_server_is_left_to_its_keys(tmp_path: Path) -> None:
    with serve(write_project(tmp_path, "server: {api_keys: [k3y]}\n")) as srv:
        keyed = {"Authorization": "Bearer k3y", **LINK}
        assert httpx.get(f"{srv.url}/v1/runs", headers=keyed).status_code == 200
