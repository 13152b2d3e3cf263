"""The one masking policy (fim/masking/): every encoding, values not text, literal keys."""

from __future__ import annotations

import base64
import html
import json
import logging
import random
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from fim.masking import (
    MASK,
    Masker,
    StreamMasker,
    config_secrets,
    encodings,
    known,
    mask_value,
    remember,
    secret_key,
)

HOSTILE = 'pa"ss\\wo rd+/=&é'
"""Quote, backslash, space, `+`, `/`, `=`, `&` and a non-ASCII letter: every escape differs."""


def encoded_forms(secret: str) -> dict[str, str]:
    data = secret.encode()
    forms = {
        "raw": secret,
        "json": json.dumps(secret),
        "json ascii=False": json.dumps(secret, ensure_ascii=False),
        "json twice": json.dumps(json.dumps(secret)),
        "json with \\/": json.dumps(secret).replace("/", "\\/"),
        "html": html.escape(secret),
        "xml text": html.escape(secret, quote=False),
        "quote": quote(secret),
        "quote safe=''": quote(secret, safe=""),
        "quote_plus": quote_plus(secret),
        "lower-case hex": quote(secret, safe="").lower(),
    }
    for prefix in (b"", b"u", b"us", b"user:"):
        for suffix in (b"", b"!", b"!!"):
            blob = prefix + data + suffix
            forms[f"b64 {prefix!r}+{suffix!r}"] = base64.b64encode(blob).decode()
            forms[f"b64url {prefix!r}+{suffix!r}"] = base64.urlsafe_b64encode(blob).decode()
            forms[f"b64 unpadded {prefix!r}+{suffix!r}"] = (
                base64.b64encode(blob).decode().rstrip("=")
            )
    return forms


@pytest.mark.parametrize("secret", [HOSTILE, "sk-live-4f9a8b7c6d5e", "hunter2!"])
def test_every_encoding_of_a_secret_is_masked(secret: str):
    masker = Masker([secret])
    body = base64.b64encode(secret.encode()).decode().rstrip("=")
    for name, form in encoded_forms(secret).items():
        masked = masker.text(f"before {form} after")
        assert MASK in masked, name
        assert secret not in masked and form not in masked, name
        # Whatever is left of a base64 form decodes to at most two bytes of the secret.
        if name.startswith("b64"):
            assert body[:-3] not in masked, name


def test_values_are_masked_not_serialised_text():
    masker = Masker([HOSTILE])
    value = {"args": {"q": HOSTILE, "nested": [f"x{HOSTILE}y", 3, None]}, HOSTILE: True}
    masked = masker.value(value)
    assert masked == {"args": {"q": MASK, "nested": [f"x{MASK}y", 3, None]}, MASK: True}
    # The serialised document is still valid JSON and holds no form of the secret.
    text = json.dumps(masked)
    assert json.loads(text) == masked and "ss\\\\wo" not in text


@pytest.mark.parametrize("secret", [HOSTILE, "sk-live-4f9a8b7c6d5e", "p\u00e4ss\U0001f511w\tord"])
def test_value_prefilter_finds_every_form_in_any_string(secret: str):
    """`Masker.value` skips the walk when the dumped value holds no form: every form, in a
    dict key or a value, amid escaped and non-ASCII text, must still be found and masked."""
    masker = Masker([secret])
    for name, form in encoded_forms(secret).items():
        for value in (
            {"run": {"events": [{"text": f'\u00e9"\\ {form} \U0001f600'}]}},
            {"k": [1, 2.5, None, True, {f"<{form}>": "v"}]},
            [("tuple", form)],
        ):
            masked = json.dumps(masker.value(value), ensure_ascii=False)
            assert MASK in masked and form not in masked, name
    clean = {"run": {"events": [{"text": "nothing secret", "n": 3}]}}
    assert masker.value(clean) is clean  # no copy when nothing is masked


def test_short_values_and_non_secrets_are_left_alone():
    masker = Masker(["abc", "sk-1234567"])
    assert masker.text("abc sk-1234567") == f"abc {MASK}"
    assert not Masker() and Masker().text("anything") == "anything"
    assert Masker(["sk-1234567"]).contains(quote_plus("sk-1234567 "))


def test_literal_credentials_under_secret_keys():
    declaration = {
        "model": {"model": "openai/gpt-4o", "api_key": "sk-literal-123456", "max_tokens": 900},
        "headers": {"Authorization": "Bearer tok-literal-98765", "Accept": "text/plain"},
        "env": {"GITHUB_TOKEN": "ghp_literal_value", "LOG_LEVEL": "debug"},
        "url": "postgresql://app:p%40ss-w0rd@db:5432/crm",
        "api_keys": ["key-one-literal", "key-two-literal"],
        "operator_keys": ["ops-key-literal"],
        "template": {"token": "{{ inputs.token }}"},
        "session_id": "alice-session",
        "auth": {"type": "api_key", "key": "key-literal-0042", "name": "X-Key"},
    }
    found = config_secrets(declaration)
    assert {"sk-literal-123456", "tok-literal-98765", "ghp_literal_value"} <= found
    assert {"p%40ss-w0rd", "p@ss-w0rd", "key-one-literal", "key-two-literal"} <= found
    assert "ops-key-literal" in found
    assert not found & {"openai/gpt-4o", "text/plain", "debug", "{{ inputs.token }}"}
    assert "alice-session" not in found and "key-literal-0042" in found
    shown = Masker().value(declaration, keys=True)
    assert shown["model"] == {"model": "openai/gpt-4o", "api_key": MASK, "max_tokens": 900}
    assert shown["headers"] == {"Authorization": MASK, "Accept": "text/plain"}
    assert shown["api_keys"] == [MASK, MASK] and shown["operator_keys"] == [MASK]


def test_secret_looking_keys():
    for key in ("api_key", "X-API-Key", "Authorization", "DB_PASSWORD", "token", "dsn", "X-Auth"):
        assert secret_key(key), key
    for key in ("max_tokens", "token_budget", "model", "keyword", "monkey", "author", "key"):
        assert not secret_key(key), key
    assert secret_key("key", declaration=True)  # `auth: {type: api_key, key: ...}`


def test_tool_arguments_for_the_audit_log():
    masked = mask_value(
        {"password": 1234, "note": "pw is hunter2!!", "limit": 3}, Masker(["hunter2!!"])
    )
    assert masked == {"password": MASK, "note": f"pw is {MASK}", "limit": 3}


def test_a_secret_split_over_stream_pieces_is_caught():
    secret = "sk-stream-0123456789"
    stream = StreamMasker(Masker([secret]))
    text = "the key is " + secret + ", done"
    out = "".join(stream.feed(text[i : i + 3]) for i in range(0, len(text), 3)) + stream.flush()
    assert out == f"the key is {MASK}, done"


def test_the_process_masks_logs_with_every_known_secret(caplog: pytest.LogCaptureFixture):
    remember(["log-secret-31337"])
    assert "log-secret-31337" in known().secrets
    with caplog.at_level(logging.INFO, logger="fim.test"):
        logging.getLogger("fim.test").info("connecting with %s", "log-secret-31337")
        try:
            raise ValueError("bad key log-secret-31337")
        except ValueError:
            logging.getLogger("fim.test").exception("failed")
    assert "log-secret-31337" not in caplog.text and MASK in caplog.text


def test_the_loader_records_literal_secrets(tmp_path: Path):
    from fim.build.compile import compile_project

    (tmp_path / "fim.yaml").write_text(
        "name: lit\nmodels:\n  general: {model: openai/gpt-4o, api_key: sk-written-in-git}\n"
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("description: an agent\n")
    snapshot = compile_project(tmp_path)
    assert "sk-written-in-git" in snapshot.secrets
    assert snapshot.mask("key sk-written-in-git") == f"key {MASK}"


async def test_a_cassette_never_holds_a_secret_and_still_replays(tmp_path: Path):
    from fim.eval.cassettes import Cassette, CassetteModel
    from fim.llm.scripted import ScriptedModel, text
    from fim.types import Message

    secret = 'sk-reply-"le\\ak-0451'
    masker = Masker([secret])
    path = tmp_path / "case.json"
    live = ScriptedModel([text(f"the key is {secret}"), text("done")])
    recorder = CassetteModel("m", lambda: live, Cassette(path, "record", masker))
    talk = [Message(role="user", content=f"remember {secret}")]
    first = await recorder.complete(talk)
    assert secret in (first.message.content or "")  # the recording run gets the real reply
    talk += [first.message, Message(role="user", content="and now?")]
    await recorder.complete(talk)
    recorder.cassette.save()
    stored = path.read_text()
    assert "the key is ***" in stored and not masker.contains(stored)
    assert "le\\\\ak" not in stored and base64.b64encode(secret.encode()).decode() not in stored

    def no_model() -> ScriptedModel:
        raise AssertionError("a replay must not call the model")

    player = CassetteModel("m", no_model, Cassette(path, "replay", masker))
    talk = [Message(role="user", content=f"remember {secret}")]
    replayed = await player.complete(talk)
    assert replayed.message.content == "the key is ***"
    talk += [replayed.message, Message(role="user", content="and now?")]
    assert (await player.complete(talk)).message.content == "done"
    assert (player.cassette.hits, player.cassette.misses) == (2, 0)


async def test_sse_masks_a_secret_split_over_tokens():
    from fim.events import RunFinished, Token
    from fim.server.http import sse

    secret = "sk-sse-split-7777777"
    remember([secret])
    text = f"your key: {secret}."

    async def events():  # what an engine that masks each chunk alone would emit
        for i in range(0, len(text), 5):
            yield Token(run_id="r", text=text[i : i + 5])
        yield RunFinished(run_id="r", output="your key: ***.", status="ok")

    body = b"".join([chunk async for chunk in sse(events()).body_iterator]).decode()
    tokens = [
        json.loads(line[6:])["text"]
        for line in body.splitlines()
        if line.startswith("data: ") and '"token"' in line
    ]
    assert "".join(tokens) == "your key: ***." and secret[:12] not in body


# --------------------------------------------------------------------------- cuts

CUT_SECRET = "sk-live-9f8e7d6c5b4a3210"


def _pieces_of(secret: str, text: str) -> list[str]:
    """Every part of `secret` of MIN_SECRET (4) characters or more that `text` holds."""
    return [
        secret[i:j]
        for i in range(len(secret))
        for j in range(i + 4, len(secret) + 1)
        if secret[i:j] in text
    ]


def test_a_cut_shows_no_part_of_a_secret_wherever_it_falls():
    """Cut first and masked after, a text kept the part of a key before the cut, which no
    form matches: padding slid the cut along the key and showed all but its last
    character. Masked first, then cut, the key is gone wherever the cut falls."""
    masker = Masker([CUT_SECRET])
    for pad in range(40):
        text = "a" * pad + f'{{"key": "{CUT_SECRET}", "json": {json.dumps(CUT_SECRET)}}}'
        for limit in range(1, len(text)):
            head, cut = masker.head(text, limit)
            tail, _ = masker.tail(text, limit)
            assert len(head) <= limit and len(tail) <= limit
            assert _pieces_of(CUT_SECRET, head) == [], (pad, limit, head)
            assert _pieces_of(CUT_SECRET, tail) == [], (pad, limit, tail)
            assert cut in (0, len(text) - limit)


def test_a_piece_of_a_secret_an_earlier_cut_left_at_the_edge_is_masked():
    """A text may reach fim already cut (a body read up to a byte cap, a program's output
    kept up to its first bytes): the piece at its end that begins a secret, or at its start
    that ends one, is masked, at least MIN_SECRET characters of it, in any form."""
    masker = Masker([CUT_SECRET])
    b64 = base64.b64encode(f"u:{CUT_SECRET}".encode()).decode()
    assert masker.edge("echo: " + CUT_SECRET[:-1]) == "echo: ***"
    assert masker.edge("echo: " + CUT_SECRET[:4]) == "echo: ***"
    assert masker.edge("echo: " + CUT_SECRET[:3]) == "echo: sk-"  # too short to tell
    assert masker.edge("echo: " + quote(CUT_SECRET)[:12]) == "echo: ***"
    assert masker.edge(b64[:20]) == b64[:3] + "***"  # `u:` shares the first characters
    assert masker.edge(CUT_SECRET[5:] + " rest", at="start") == "*** rest"
    assert masker.edge("the end: sk-") == "the end: sk-"


def test_a_text_that_needs_no_cut_is_left_to_the_exits():
    """Only a cut is masked here: a whole result reaches the engine as it is, which masks
    it and tells the run that it did (a Notice)."""
    masker = Masker([CUT_SECRET])
    text = f"key {CUT_SECRET}"
    assert masker.head(text, 100) == (text, 0)
    assert masker.tail(text, 100) == (text, 0)
    # longer than the limit, but not once masked: shown whole, nothing cut
    assert masker.head(text, len(text) - 5) == ("key ***", 0)


# --------------------------------------------------------------------------- speed


def test_looking_only_where_a_forms_characters_are_masks_what_looking_everywhere_does():
    """`Masker.text` skips a form when the text lacks one of its rarest characters (a
    `memchr`, not a scan per form). That is only ever a shortcut: on texts built from
    pieces of every form of several secrets, noise of every kind of character and other
    scripts, it masks exactly what a scan for every form, longest first, masks."""
    secrets = [HOSTILE, "sk-live-4f9a8b7c6d5e", "hunter2!", "p\u00e4ss\U0001f511w\tord", "Zz*9"]
    masker = Masker(secrets)
    forms = sorted({f for s in secrets for f in encodings(s)} - {MASK}, key=lambda f: (-len(f), f))

    def everywhere(text: str) -> str:
        for form in forms:
            text = text.replace(form, MASK)
        return text

    noise = ["a", "Q", "7", " ", "%", "\\", '"', "*", "\u00e9", "\u2192", "\U0001f600", "\t"]
    rng = random.Random(2718)
    for _ in range(3000):
        parts = []
        for _ in range(rng.randrange(1, 6)):
            form = rng.choice(forms)
            start = rng.randrange(len(form))
            parts.append(
                form if rng.random() < 0.5 else form[start : rng.randrange(start, len(form)) + 1]
            )
            parts.append("".join(rng.choice(noise) for _ in range(rng.randrange(0, 4))))
        text = "".join(parts)
        assert masker.text(text) == everywhere(text), text
        assert masker.contains(text) == (everywhere(text) != text), text
        assert masker.value({"k": [text]}) == {"k": [everywhere(text)]}, text
