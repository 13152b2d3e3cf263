"""The network variables fim hands to the processes it starts for the project, command hooks
and stdio MCP servers alike: where the CA bundle is and which proxy to go through.

Both get an allow-listed environment so fim's secrets (model and connector keys) stay in
fim (`fim.config.interpolate.HOOK_BASE_ENV`, `fim.mcp.transport.PASSED_ENV`). Without these,
a `uv run` hook or a `uvx` / `npx` server failed on the first download where the network
needs a company CA (`invalid peer certificate: UnknownIssuer`) or a proxy, while the same
command worked in the shell (newcomer-50 #2).

A CA bundle's path is no secret. A proxy URL is passed only without userinfo: one with a
user name or password in it (`http://user:pass@proxy:3128`) is a credential, withheld unless
the hook (`env: [HTTPS_PROXY]`) or the server (`env: {HTTPS_PROXY: "${HTTPS_PROXY}"}`)
asks for it, and then a secret like any `${VAR}` value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

TLS_ENV = frozenset(
    {
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "PIP_CERT",
    }
)
"""Where OpenSSL, rustls (uv), requests, curl, Node and pip find the CA certificates."""
PROXY_ENV = frozenset(
    name
    for scheme in ("HTTP", "HTTPS", "ALL", "NO")
    for name in (f"{scheme}_PROXY", f"{scheme.lower()}_proxy")
)
"""The proxy variables curl, requests, httpx, uv, pip and Node's agents read."""
NETWORK_ENV = TLS_ENV | PROXY_ENV


def has_userinfo(url: str) -> bool:
    """Whether a proxy URL may carry a user name or password (`http://user:pass@host:3128`,
    also without a scheme): any `@` in it, raw or percent-encoded. Looking only before the
    host's first `/` let credentials through that clients read all the same: urllib sent
    `http://u:p/ss@h:3128` as `u` / `p/ss`, curl `http:/u:p@h` as `u` / `p` (attack-56 F4).
    A proxy URL has no other use for an `@`: fail closed."""
    return "@" in url or "%40" in url.lower()


def network_env(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The CA bundle and proxy variables of `environ` a hook or stdio MCP server is given,
    and the names withheld: proxy URLs with userinfo (credentials)."""
    passed: dict[str, str] = {}
    withheld: list[str] = []
    for name in sorted(NETWORK_ENV):
        value = environ.get(name)
        if value is None:
            continue
        if name in PROXY_ENV and has_userinfo(value):
            withheld.append(name)
        else:
            passed[name] = value
    return passed, withheld


NETWORK_FAILURE = re.compile(
    r"certificate|CERTIFICATE_VERIFY_FAILED|UnknownIssuer|\bSSL|\bTLS\b|proxy",
    re.IGNORECASE,
)
"""What a program's error says when it could not verify a server's certificate or get
through a proxy (uv's `invalid peer certificate: UnknownIssuer`, Python's
`CERTIFICATE_VERIFY_FAILED`, npm's `SELF_SIGNED_CERT_IN_CHAIN`... `certificate`, pip's
`ProxyError`)."""


def network_hint(how: str) -> str:
    """The hint of a hook or server whose error reads like a certificate or proxy failure:
    what fim passes, what it withholds, and `how` to pass more (`env: [NAME]` on the
    hook). Names no variable of fim's: this text reaches the model and API callers, and
    which credentials fim holds is the operator's to read (`withheld_note`)."""
    return (
        "if this is a certificate or proxy failure: fim passes SSL_CERT_FILE, SSL_CERT_DIR, "
        "REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT and the *_proxy "
        "variables, but not a proxy URL with a user name or password in it; pass that, or "
        f"another variable the tool reads, with {how}"
    )


def withheld_note(what: str, names: list[str], how: str) -> str:
    """For fim's log (the operator's): the proxy variables withheld from `what` because
    their URL holds credentials, and `how` to pass them."""
    listed = ", ".join(names)
    return (
        f"{what} failed with what reads like a certificate or proxy error; {listed} "
        f"{'is' if len(names) == 1 else 'are'} set for fim but withheld, since a proxy URL "
        f"with a user name or password is a credential: pass {'it' if len(names) == 1 else 'them'}"
        f" with {how}"
    )
