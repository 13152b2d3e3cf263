"""What `fim schema connector` tells an editor about an HTTP action's `parameters` matches
what attack-65 F1 made the connector do: an action that names its properties sends only
those unless the schema opens it (`additionalProperties`, `patternProperties`), and a
method-override name is refused whatever the schema says. It used to say every other
argument went to the query or the body."""

from __future__ import annotations

from fim.config.export import json_schema


def test_the_parameters_description_says_which_arguments_are_sent() -> None:
    action = json_schema("connector")["$defs"]["HttpAction"]["properties"]["parameters"]
    text = " ".join(action["description"].split())
    assert "only those are sent" in text
    assert "any other argument is refused" in text
    assert "`additionalProperties`" in text and "`patternProperties`" in text
    assert "`_method`" in text and "whatever the schema says" in text
