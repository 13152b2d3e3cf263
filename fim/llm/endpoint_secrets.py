"""The secrets a model's base URL carries, and the one a request cannot send.

fim.yaml's `api_base` is a declaration: the loader registers its password and credential
query values as secrets (`fim.masking.config_secrets`). `OPENAI_BASE_URL` (and a local
provider's `OLLAMA_API_BASE`) is read from the environment when a model is built or its
endpoint checked, so it is remembered here, as the provider key is (`fim.llm.base.
resolve_key`): a "cannot connect" error printed it whole (attack-65 F4). And a URL with
`user:password@` cannot go out with an API key (aiohttp refuses two Authorization
headers with a ValueError, which made every served run a 500): that is a clear error.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from fim.errors import RunError


def environment_base() -> str | None:
    """`OPENAI_BASE_URL`, its password and credential query values remembered as secrets
    (`remember_url`): fim.yaml's `api_base` is a declaration the loader reads them from,
    the variable is not, and a "cannot connect" error printed it whole (attack-65 F4)."""
    url = os.environ.get("OPENAI_BASE_URL") or None
    if url is not None:
        remember_url(url)
    return url


def remember_url(url: str) -> None:
    """Remember the secrets a model URL carries, as the provider key is remembered
    (`fim.llm.base.resolve_key`): a `user:password@` and `?api-key=`-style values."""
    if "@" in url or "?" in url:
        # deferred: loading fim.masking costs a few ms
        from fim.masking import config_secrets, remember

        remember(config_secrets(url))


def _userinfo(url: str) -> bool:
    """Whether `url` carries a user name or password (`http://user:pw@host/v1`)."""
    try:
        parts = urlsplit(url)
        return bool(parts.username or parts.password)
    except ValueError:  # not a URL: the request fails on its own, with aiohttp's words
        return False


def check_no_userinfo(model: str, url: str) -> None:
    """Raise RunError when `url` carries a user name or password: the API key is sent as
    `Authorization: Bearer`, and the URL's pair would be a second Authorization header."""
    if not _userinfo(url):
        return
    # deferred: loading fim.masking costs a few ms
    from fim.masking import masked_url

    raise RunError(
        f"{model}: the model URL {masked_url(url)} holds a user name and password, which "
        "cannot be sent with the API key: both would be the request's Authorization header",
        hint="remove `user:password@` from api_base or OPENAI_BASE_URL (the key is sent as "
        "`Authorization: Bearer`), or unset the key to send them instead",
    )


__all__ = ["check_no_userinfo", "environment_base", "remember_url"]
