"""A proxy URL holding credentials in any form a client reads them from is withheld from
hooks and stdio MCP servers unless listed, and then a secret: any `@` in it counts, raw or
percent-encoded. Before, only the part before the host's first `/` was looked at, so a
password with a raw `/` (`http://u:pa/ss@h:3128`, which urllib sends as `u` / `pa/ss`) and
a one-slash scheme (`http:/u:p@h`, which curl sends as `u` / `p`) reached every hook as
they were, unmasked (attack-56 F4)."""

from __future__ import annotations

import urllib.request

import pytest

from fim.config.child_env import has_userinfo, network_env
from fim.config.interpolate import passed_anyway

CREDENTIALED = [
    "http://proxyuser:pa/ss-9f3k2@127.0.0.1:30599",  # a raw `/` in the password
    "http:/proxyuser:s3cretpass@127.0.0.1:30599",  # one slash
    "http:proxyuser:s3cretpass@127.0.0.1:30599",  # none
    "http://u:p@[::1]:3128",  # IPv6 host
    "http://u:p/x@[2001:db8::1]:3128/",
    "http://u%3Ap%2Fq@proxy:3128",  # percent-encoded user and password
    "http://u:p%40x@proxy:3128",
    "http://u%40corp:p%40proxy:3128",  # an encoded `@` only
    "  http://u:p@proxy:3128  ",
    "HTTP://U:P/Q@PROXY:3128",
]


@pytest.mark.parametrize("url", CREDENTIALED)
def test_a_proxy_url_a_client_could_read_credentials_from_is_withheld(url: str) -> None:
    assert has_userinfo(url)
    assert network_env({"HTTPS_PROXY": url, "https_proxy": url}) == (
        {},
        ["HTTPS_PROXY", "https_proxy"],
    )
    assert not passed_anyway("HTTPS_PROXY", url)  # listed in `env:`, it is a secret


def test_urllib_does_read_credentials_from_the_forms_that_got_through() -> None:
    # why those count: Python's urllib (and curl) send them as Proxy-Authorization
    parse = urllib.request._parse_proxy  # type: ignore[attr-defined]
    assert parse(CREDENTIALED[0])[1:3] == ("proxyuser", "pa/ss-9f3k2")


@pytest.mark.parametrize(
    "url",
    [
        "http://proxy.corp:3128",
        "http://[::1]:3128",
        "socks5://[2001:db8::1]:1080/",
        "proxy.corp:3128",
        "http://proxy.corp:3128/path%2Fx",
    ],
)
def test_a_proxy_url_without_credentials_is_still_passed(url: str) -> None:
    assert not has_userinfo(url)
    assert network_env({"HTTPS_PROXY": url}) == ({"HTTPS_PROXY": url}, [])
    assert passed_anyway("HTTPS_PROXY", url)
