"""Newcomer 50, finding 11: `fim connector import URL` says how to download the spec, into a
file named with the spec's own extension (`forecast.yml` -> `NAME.openapi.yml`), not a
`.json` file holding YAML."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from fim.commands.connector import register


def import_url(url: str) -> str:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """fim"""

    register(app)
    result = CliRunner().invoke(app, ["connector", "import", url, "--name", "om", "--out", "-"])
    assert result.exit_code == 1
    return result.output


@pytest.mark.parametrize(
    ("url", "local"),
    [
        (
            "https://raw.githubusercontent.com/open-meteo/open-meteo/main/openapi/forecast.yml",
            "yml",
        ),
        ("https://example.com/api/openapi.YAML?ref=main", "yaml"),
        ("https://example.com/api/v3/openapi.json", "json"),
        ("https://example.com/v3/api-docs", "json"),  # no extension: the content is sniffed
    ],
)
def test_the_download_hint_keeps_the_specs_extension(url: str, local: str) -> None:
    out = import_url(url)
    assert f"cannot import from a URL ({url}): fim reads a local file" in out
    assert (
        f"download it first: curl -fsSL -o om.openapi.{local} '{url}', then "
        f"fim connector import om.openapi.{local} --name om"
    ) in " ".join(out.split())
