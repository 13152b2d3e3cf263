"""A list sent in the query as one joined value (`query_style: comma`, `space`, `pipe`)
must reach the API as the list hooks and the schema judged: an item holding its style's
separator is refused, with an observation naming the parameter, instead of being sent as
two items (`ids: ["1,2"]` was `ids=1,2`: a `maxItems` limit or a hook checking each item
judged another list than the API received, attack-56 F6). Other characters are sent
encoded as before, and exploded lists (one parameter per item) take any item."""

from __future__ import annotations

from typing import Any

import pytest

from fim.config.schema import HttpAction, HttpConnector
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_request import build_request

IDS = {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "string"}}}}


def action(style: str | None) -> HttpAction:
    styles = {"ids": style} if style else {}
    return HttpAction.model_validate({"path": "/lookup", "parameters": IDS, "query_style": styles})


@pytest.mark.parametrize(("style", "item"), [("comma", "1,2"), ("space", "1 2"), ("pipe", "4|5")])
def test_an_item_holding_its_styles_separator_is_refused(style: str, item: str) -> None:
    with pytest.raises(ValueError, match=r"query parameter 'ids': item 1 .* holds") as caught:
        build_request(action(style), {"ids": ["3", item]})
    assert f"query_style: {style}" in str(caught.value)


@pytest.mark.parametrize(
    ("style", "sent"),
    [
        ("comma", "3&admin=1,7#x,8%2C9,4|5 6"),
        ("pipe", "3&admin=1|7#x|8%2C9|a,b"),
        (None, ["3&admin=1", "7#x", "8%2C9", "a,b"]),
    ],
)
def test_other_characters_are_sent_in_their_item(style: str | None, sent: Any) -> None:
    items = ["3&admin=1", "7#x", "8%2C9", "4|5 6" if style == "comma" else "a,b"]
    assert build_request(action(style), {"ids": items})["params"] == {"ids": sent}


async def test_the_model_reads_which_parameter_was_refused() -> None:
    decl = HttpConnector.model_validate(
        {
            "kind": "http",
            "base_url": "http://127.0.0.1:9",  # never called: refused before sending
            "actions": {
                "lookup": {"path": "/lookup", "parameters": IDS, "query_style": {"ids": "comma"}}
            },
        }
    )
    client = HttpConnectorClient("crm", decl)
    try:
        result = await client.call("lookup", {"ids": ["1,2", "3"]})
    finally:
        await client.aclose()
    assert result.is_error
    assert "query parameter 'ids'" in result.content and "'1,2'" in result.content
