"""An unset variable that holds a credential is never offered a default to commit: its hint
says to export it, or to write `${NAME:-}` (empty) while developing, as the connector
importer does; an ordinary variable is still offered `${NAME:-value}` (newcomer-50 #11)."""

from __future__ import annotations

import pytest

from fim.config.interpolate import interpolate
from fim.config.yamlio import parse


def hint_for(yaml: str, path: str = "connectors/meteo.yaml") -> str:
    """The hint of the one unset-variable problem `yaml` has, with nothing exported."""
    doc = parse(yaml, path)
    interpolate(doc, set(), env={})
    ((_, problem),) = doc.unset
    return problem.hint or ""


@pytest.mark.parametrize(
    "yaml, name",
    [
        # a variable named like a credential, wherever it is written (the Open-Meteo import)
        ('defaults: {query: {apikey: "${OPEN_METEO_API_KEY}"}}\n', "OPEN_METEO_API_KEY"),
        ('headers: {X-Team: "${TEAM_TOKEN}"}\n', "TEAM_TOKEN"),
        ('env: {DB: "${DB_PASSWORD}"}\n', "DB_PASSWORD"),
        # any variable in a credential position: `auth:`, a token, an Authorization header
        ('auth: {type: bearer, token: "${CRM}"}\n', "CRM"),
        ('auth: {type: basic, username: "${CRM_USER}"}\n', "CRM_USER"),
        ('headers: {Authorization: "Bearer ${GH}"}\n', "GH"),
    ],
    ids=["api-key-name", "token-name", "password-name", "auth-token", "under-auth", "header"],
)
def test_a_credential_is_exported_or_left_empty_never_given_a_value(yaml: str, name: str) -> None:
    assert hint_for(yaml) == (
        f"export {name}=..., or write ${{{name}:-}} while developing; never a value there: "
        "it would be a secret in git"
    )


def test_an_ordinary_variable_is_still_offered_a_default() -> None:
    assert hint_for('description: "${TEAM_NAME}"\n') == (
        "export TEAM_NAME=... or give a default: ${TEAM_NAME:-value}"
    )


def test_a_word_that_only_contains_key_is_no_credential() -> None:
    assert hint_for('description: "${MONKEY_BUSINESS}"\n').endswith("${MONKEY_BUSINESS:-value}")
