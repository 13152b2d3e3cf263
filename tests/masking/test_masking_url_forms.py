"""A literal URL's password is a secret of the project however it is written, and finding
it costs time linear in the text (attack-47 F6, F7).

- `openssl rand -base64` passwords hold a `/`: SQLAlchemy (fim's store) reads
  `postgresql://fim:Hunter/2Secret@db/x` as password `Hunter/2Secret`, so the masker must
  know it, though `urlsplit` ends the user info at the `/`.
- The userinfo rules ran their scheme part from every position of a run of scheme
  characters: `'a' * n + '://@'` cost n² steps (2.4 s at 40 KB, about 25 minutes at 1 MB)
  in every compile that reads such a declaration. A match now starts only where a run of
  scheme characters starts, so each run is scanned once."""

from __future__ import annotations

import time

import pytest

from fim.masking import Masker, config_secrets
from fim.masking.keys import _USERINFO_PASSWORD, URL_PASSWORD, masked_url


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql://fim:Hunter/2Secret@db/x", "Hunter/2Secret"),  # base64's `/`
        ("postgresql://fim:ab/cd+ef/gh==@db:5432/x", "ab/cd+ef/gh=="),
        ("postgresql://fim:Hunter\t2Secret@db/x", "Hunter\t2Secret"),  # SQLAlchemy keeps a tab
        ("postgresql://fim@corp:Hunter/2Secret@db/x", "Hunter/2Secret"),  # Azure's user@server
    ],
)
def test_a_password_holding_a_slash_or_a_tab_is_collected_and_masked(
    url: str, password: str
) -> None:
    secrets = config_secrets({"sandbox": {"env": {"DATABASE_URL": url}}})
    assert password in secrets
    echoed = Masker(secrets).text(f"$ echo $DATABASE_URL\n{url}\n")
    assert password not in echoed
    assert password not in masked_url(url)


@pytest.mark.parametrize(
    "text",
    [
        "https://docs.example.com:8443/guide/setup",  # a port and a path, no user info
        "see https://example.com/a/b?x=1 and write to ops@example.com",
        "postgresql://fim@db/x",  # a user, no password
    ],
)
def test_a_url_without_a_password_gives_no_secret(text: str) -> None:
    assert not any(URL_PASSWORD.finditer(text))


def test_a_match_never_starts_inside_a_run_of_scheme_characters() -> None:
    """The linear bound itself: an attempt from inside a run of scheme characters would
    rescan the rest of the run, once per position (quadratic); each run is tried once."""
    text = "xxxxpostgresql://fim:Hunter/2Secret@db/x"
    for pattern in (URL_PASSWORD, _USERINFO_PASSWORD):
        assert pattern.search(text) is not None
        assert pattern.search(text).start() == 0  # type: ignore[union-attr]
        for inside in range(1, text.index("://")):
            assert pattern.match(text, inside) is None, (pattern.pattern, inside)


def test_a_url_glued_to_digits_or_dots_is_still_read() -> None:
    """The run is the scheme, whatever precedes its first letter (a cap on the scheme's
    length would do too; a run of any length is accepted here)."""
    for glued in ("1postgresql", "v2.postgresql", "x" * 40 + "postgresql"):
        secrets = config_secrets({"note": f"dsn={glued}://fim:Hunter2Secret@db/x"})
        assert "Hunter2Secret" in secrets


def test_a_megabyte_of_hostile_text_is_read_in_one_pass() -> None:
    """1 MB of scheme characters before `://`, then a real URL: its password is found.
    With the quadratic scan this took about 25 minutes of CPU; linear, a few milliseconds.
    The CPU bound is 100 times the linear cost, 1/300 of the quadratic one."""
    hostile = "a" * 1_000_000 + "://@ " + "postgresql://fim:Hunter/2Secret@db/x"
    started = time.process_time()
    secrets = config_secrets({"description": hostile})
    masked = masked_url("a" * 1_000_000 + "://u:" + "@" * 1000)
    spent = time.process_time() - started
    assert "Hunter/2Secret" in secrets
    assert masked.endswith(":***@")
    assert spent < 5.0
