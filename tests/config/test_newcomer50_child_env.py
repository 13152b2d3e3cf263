"""The one list of network variables hooks and stdio MCP servers get: the CA bundles and the
proxies, a proxy URL only without credentials (newcomer-50 #2)."""

from __future__ import annotations

import pytest

from fim.config.child_env import NETWORK_FAILURE, has_userinfo, network_env
from fim.config.interpolate import passed_through


def test_ca_bundles_and_proxies_without_credentials_are_passed() -> None:
    environ = {
        "SSL_CERT_FILE": "/etc/ca.pem",
        "SSL_CERT_DIR": "/etc/ssl/certs",
        "REQUESTS_CA_BUNDLE": "/etc/ca.pem",
        "CURL_CA_BUNDLE": "/etc/ca.pem",
        "NODE_EXTRA_CA_CERTS": "/etc/ca.pem",
        "PIP_CERT": "/etc/ca.pem",
        "HTTP_PROXY": "http://proxy:3128",
        "https_proxy": "proxy:3128",
        "ALL_PROXY": "socks5://proxy:1080",
        "no_proxy": "localhost,127.0.0.1,.corp",
        "OPENAI_API_KEY": "sk-not-for-children",
        "PIP_INDEX_URL": "https://token@pypi.corp/simple",
    }
    passed, withheld = network_env(environ)
    assert passed == {
        k: v for k, v in environ.items() if k not in ("OPENAI_API_KEY", "PIP_INDEX_URL")
    }
    assert withheld == []


@pytest.mark.parametrize(
    "url",
    ["http://user:pass@proxy:3128", "http://token@proxy:3128", "user:pass@proxy:3128"],
)
def test_a_proxy_url_with_userinfo_is_withheld(url: str) -> None:
    assert has_userinfo(url)
    assert network_env({"HTTPS_PROXY": url, "http_proxy": url}) == (
        {},
        ["HTTPS_PROXY", "http_proxy"],
    )


def test_an_at_sign_in_a_proxy_path_counts_as_userinfo() -> None:
    # urllib reads `proxy:3128/path` as its userinfo (attack-56 F4): fail closed
    assert has_userinfo("http://proxy:3128/path@x")


def test_listing_a_network_variable_makes_only_a_credential_a_secret() -> None:
    secrets: set[str] = set()
    environ = {
        "SSL_CERT_FILE": "/etc/corp/ca.pem",
        "http_proxy": "http://proxy.corp:3128",
        "HTTPS_PROXY": "http://alice:pw-1234@proxy.corp:3128",
    }
    passed_through(["SSL_CERT_FILE", "http_proxy", "HTTPS_PROXY"], secrets, environ)
    assert secrets == {"http://alice:pw-1234@proxy.corp:3128"}


@pytest.mark.parametrize(
    "stderr",
    [
        "Caused by: invalid peer certificate: UnknownIssuer",
        "ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED]",
        "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN self-signed certificate in certificate chain",
        "pip._vendor.urllib3.exceptions.ProxyError: Cannot connect to proxy.",
    ],
)
def test_certificate_and_proxy_failures_are_recognised(stderr: str) -> None:
    assert NETWORK_FAILURE.search(stderr)


def test_a_hooks_own_message_is_not_taken_for_one() -> None:
    assert not NETWORK_FAILURE.search("Blocked: rm -rf is not allowed in this project")
