"""Secrets at rest and in the encodings programs give them (attack report, findings 2, 4, 6).

- A secret the model streams over two tokens is never stored in pieces: the run event log
  (`fim_run_events`, read by every replica) masks tokens as a stream, and what it stores
  still joins to the run's text for whoever replays or tails it.
- A validation problem never quotes a secret, cut or escaped: a value `${VAR}` gave is quoted
  as written, anything else is masked before it is quoted and cut.
- Base64 wrapped over lines (MIME, PEM, the `base64` CLI) and hex are masked like every
  other form, and a stream masks them too.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.config.loader import load
from fim.masking import MASK, MIN_SECRET, Masker, StreamMasker, known, remember
from fim.store import Store
from fim.store.live import EventLog, read_events, tail

# --------------------------------------------------------------------------- helpers


def pieces(secret: str, text: str) -> list[str]:
    """Every part of `secret` of MIN_SECRET (4) characters or more that `text` shows."""
    return [
        secret[i:j]
        for i in range(len(secret))
        for j in range(i + MIN_SECRET, len(secret) + 1)
        if secret[i:j] in text
    ]


def stored_rows(root: Path) -> list[dict[str, Any]]:
    """Every row of the state database's run event log, as stored (not through fim)."""
    with sqlite3.connect(root / "state.db") as db:
        rows = db.execute("select event from fim_run_events order by run_id, seq").fetchall()
    return [json.loads(event) for (event,) in rows]


def streamed(text: str, size: int) -> list[dict[str, Any]]:
    """`text` as the token events of run `r`, `size` characters each."""
    return [
        {"type": "token", "run_id": "r", "text": text[i : i + size]}
        for i in range(0, len(text), size)
    ]


# --------------------------------------------------------------------------- finding 2


STREAMED = "sk-stream-rest-7Qz9W2vX4k"
remember([STREAMED])


@pytest.mark.parametrize(
    "record", [True, False], ids=["in-memory-then-written", "written-as-it-goes"]
)
async def test_a_secret_split_over_tokens_is_never_stored_in_pieces(tmp_path: Path, record: bool):
    """Each token masked alone, the two halves of a key were two rows no form matched:
    anyone reading the table (or a backup) joined them back. Both ways the log is written
    (SQLite's run in memory then one write; the background writer of PostgreSQL and of
    workflows) store masked text, and the tokens still join to the run's masked text."""
    store = Store("sqlite:///state.db", tmp_path)
    log = EventLog(store, "r", "agent", "a", record=record)
    said = f"the key is {STREAMED}, keep it safe"
    log.add({"type": "run_started", "run_id": "r"})
    for size in (3, 7):  # the key cut at many places, twice
        for event in streamed(said, size):
            log.add(event)
        log.add({"type": "llm_call", "run_id": "r"})
    log.add({"type": "run_finished", "run_id": "r", "output": "done"})
    await log.close()
    await store.put_run("r", "agent", "a", "ok", {})  # as fim serve does after close()

    rows = stored_rows(tmp_path)
    for row in rows:
        assert pieces(STREAMED, json.dumps(row)) == [], row
    texts = [e["text"] for e in rows if e["type"] == "token"]
    masked = said.replace(STREAMED, MASK)
    assert "".join(texts) == masked * 2  # nothing lost, nothing doubled
    # each turn's text is whole before the event that follows it
    kinds = [e["type"] for e in rows]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    first_turn = kinds.index("llm_call")
    assert "".join(texts[: kinds[:first_turn].count("token")]) == masked
    assert [seq for seq, _ in await read_events(store, "r")] == list(range(1, len(rows) + 1))
    store.close()


async def test_a_tail_of_a_running_log_reads_the_masked_stream(tmp_path: Path):
    """A reader that follows the run while it goes (`GET /v1/runs/{id}/events` on SQLite
    reads it from memory) sees what will be stored: no piece, the same text."""
    store = Store("sqlite:///state.db", tmp_path)
    log = EventLog(store, "r", "agent", "a")
    said = f"{STREAMED} twice: {STREAMED}"
    log.add({"type": "run_started", "run_id": "r"})
    for event in streamed(said, 5):
        log.add(event)
    log.add({"type": "run_finished", "run_id": "r", "output": "x"})
    seen = [event async for _, event in tail(store, "r")]
    await log.close()
    assert pieces(STREAMED, json.dumps(seen)) == []
    assert "".join(e["text"] for e in seen if e["type"] == "token") == f"{MASK} twice: {MASK}"
    store.close()


async def test_a_run_cut_off_mid_stream_keeps_the_text_held_back(tmp_path: Path):
    """The end of a stream may be held back as the start of a secret: closing the log
    stores it (masked), so a run that stops on a token loses no text."""
    store = Store("sqlite:///state.db", tmp_path)
    log = EventLog(store, "r", "workflow", "w", record=False)
    said = f"partial {STREAMED[:9]}"  # could still become the key: held back
    for event in streamed(said, 4):
        log.add(event)
    await log.close()
    assert "".join(e["text"] for e in stored_rows(tmp_path)) == said
    store.close()


async def test_a_secret_learnt_mid_run_is_masked_in_the_stream_too(tmp_path: Path):
    """`known()` grows while a run goes (a reload, a hook's pass-through value): the
    log's stream masks with the new masker, what it held back included."""
    store = Store("sqlite:///state.db", tmp_path)
    log = EventLog(store, "r", "agent", "a")
    late = "sk-learnt-late-3Jm8Rq5Tz1"
    log.add({"type": "run_started", "run_id": "r"})
    log.add({"type": "token", "run_id": "r", "text": f"then {late[:8]}"})
    remember([late])
    log.add({"type": "token", "run_id": "r", "text": f"{late[8:]} and more"})
    log.add({"type": "run_finished", "run_id": "r", "output": ""})
    await log.close()
    await store.put_run("r", "agent", "a", "ok", {})
    rows = stored_rows(tmp_path)
    assert pieces(late, json.dumps(rows)) == []
    assert "".join(e["text"] for e in rows if e["type"] == "token") == f"then {MASK} and more"
    store.close()


def test_a_served_run_stores_and_replays_a_streamed_secret_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """End to end: a model repeats a `${VAR}` it was shown; the stub streams its reply in
    three pieces, the key across two. The state database holds no piece of it; the SSE
    answer and `/v1/runs/{id}/events` join to the masked reply."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.model_server import OpenAIStubServer
    from fim.testing.server import ServerThread

    secret = "crm-tok-rest-8c1e5f0a2b3d"
    monkeypatch.setenv("CRM_TOKEN", secret)
    reply = f"the token is {secret} ok"
    step = len(reply) // 3 + 1  # how the stub cuts a streamed reply
    at = reply.index(secret)
    assert any(at < cut < at + len(secret) for cut in range(step, len(reply), step))

    (tmp_path / "agents").mkdir()
    (tmp_path / "connectors").mkdir()
    with OpenAIStubServer(handler=lambda _request: reply) as model:
        (tmp_path / "fim.yaml").write_text(
            'name: rest\nstate: "sqlite:///state.db"\n'
            f"models:\n  general: {{model: openai/stub, api_base: '{model.base_url}', "
            "api_key: x, max_retries: 0}\n"
        )
        (tmp_path / "connectors" / "crm.yaml").write_text(
            "kind: http\ndescription: crm\nbase_url: http://127.0.0.1:9\n"
            "auth: {type: bearer, token: '${CRM_TOKEN}'}\n"
            "actions:\n  me: {method: GET, path: /me}\n"
        )
        (tmp_path / "agents" / "a.yaml").write_text(
            "description: a\nmodel: general\nconnectors: [crm]\n"
        )
        app_ = create_app(SnapshotHolder(compile_project(tmp_path)))
        with ServerThread(app_) as srv:
            body = {"input": "who?", "stream": True}
            answer = httpx.post(f"{srv.url}/v1/agents/a/runs", json=body, timeout=30).text
            frames = [
                json.loads(line[6:]) for line in answer.splitlines() if line.startswith("data: ")
            ]
            run_id = frames[0]["run_id"]
            replay = httpx.get(f"{srv.url}/v1/runs/{run_id}/events", timeout=30).text

    rows = stored_rows(tmp_path)
    assert [e for e in rows if e["type"] == "token"], "the run streamed tokens"
    assert pieces(secret, (tmp_path / "state.db").read_bytes().decode("latin-1")) == []
    masked = f"the token is {MASK} ok"
    assert "".join(e["text"] for e in rows if e["type"] == "token") == masked
    for text in (answer, replay):
        tokens = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        assert "".join(e.get("text", "") for e in tokens if e["type"] == "token") == masked
        assert pieces(secret, text) == []


def test_another_replica_tails_the_masked_stream_and_postgres_holds_no_piece(
    tmp_path: Path, pg_database: Any, monkeypatch: pytest.MonkeyPatch
):
    """Two replicas on PostgreSQL: replica B follows a run going on replica A (woken by
    NOTIFY) while the model streams a `${VAR}` over two tokens. B reads the masked reply,
    and no row of `fim_run_events` holds a piece of the key."""
    import threading

    import psycopg

    from fim.testing.cluster import sse_frames
    from fim.testing.model_server import OpenAIStubServer, completion
    from fim.testing.server import serve_process

    secret = "crm-tok-pg-5d4c3b2a1f0e9"
    monkeypatch.setenv("CRM_TOKEN", secret)
    reply = f"the token is {secret} ok"
    step, at = len(reply) // 3 + 1, reply.index(secret)  # how the stub cuts a streamed reply
    assert any(at < cut < at + len(secret) for cut in range(step, len(reply), step))
    release = threading.Event()

    def model(request: dict[str, Any]) -> Any:
        if not any(m.get("role") == "tool" for m in request["messages"]):
            return completion(None, [("c1", "calculator", '{"expression": "2+3"}')], "stub")
        release.wait(20)
        return reply

    db = pg_database("")
    with OpenAIStubServer(handler=model) as stub:
        root = tmp_path / "p"
        (root / "agents").mkdir(parents=True)
        (root / "connectors").mkdir()
        (root / "fim.yaml").write_text(f'name: rest\nstate: "{db.owner_url}"\n')
        (root / "connectors" / "crm.yaml").write_text(
            "kind: http\ndescription: crm\nbase_url: http://127.0.0.1:9\n"
            "auth: {type: bearer, token: '${CRM_TOKEN}'}\n"
            "actions:\n  me: {method: GET, path: /me}\n"
        )
        (root / "agents" / "a.yaml").write_text(
            f"description: a\nmodel: {{model: openai/stub, api_base: '{stub.base_url}', "
            "api_key: x, max_retries: 0}\ntools: [calculator]\nconnectors: [crm]\n"
        )
        with serve_process(root) as a, serve_process(root) as b:
            body = {"input": "2+3?", "stream": True}
            with httpx.stream("POST", f"{a}/v1/agents/a/runs", json=body, timeout=30) as resp:
                events = sse_frames(resp.iter_lines())
                _, first = next(events)
                on_b: list[dict[str, Any]] = []
                url = f"{b}/v1/runs/{first['run_id']}/events"
                with httpx.stream("GET", url, timeout=30) as followed:
                    for _, event in sse_frames(followed.iter_lines()):
                        on_b.append(event)
                        if event["type"] == "tool_result":
                            release.set()
                on_a = [first, *(event for _, event in events)]

    masked = f"the token is {MASK} ok"
    for seen in (on_a, on_b):
        assert "".join(e["text"] for e in seen if e["type"] == "token") == masked
        assert pieces(secret, json.dumps(seen)) == []
    with psycopg.connect(db.owner_url) as conn:
        rows = [r[0] for r in conn.execute("select event from fim_run_events order by seq")]
    assert [e for e in rows if e["type"] == "token"], "the run streamed tokens"
    assert pieces(secret, json.dumps(rows)) == []


# --------------------------------------------------------------------------- finding 4

LONG_KEY = "sk-ant-api03-" + "Xy7Qw9Er2Ty5Ui8Op1As4Df6Gh3Jk0Lz" * 2 + "-AbCdEf"  # 87 characters
QUOTED = "Zq'Jx\"Wv-2718"  # `repr` writes it Zq\'Jx"Wv-2718
LITERAL = "xk-" + "Nq4Vb7Xc2Lm9" * 7  # a credential written in the file, 87 characters


def broken_project(root: Path) -> Path:
    (root / "connectors").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels:\n"
        "  general: {model: openai/x, api_key: '${QPW}', max_retries: '${QPW}'}\n"
        f"  other: {{model: openai/x, api_key: [{LITERAL}]}}\n"
    )
    (root / "connectors" / "c.yaml").write_text(
        "kind: http\ndescription: c\nbase_url: http://127.0.0.1:1\n"
        "auth: {type: bearer, token: '${LONG_KEY}'}\n"
        "timeout: '${LONG_KEY}'\n"
        "actions:\n  a: {method: '${LONG_KEY}', path: ['${LONG_KEY}']}\n"
    )
    return root


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_KEY", LONG_KEY)
    monkeypatch.setenv("QPW", QUOTED)


def test_a_problem_names_the_variable_never_a_piece_of_its_value(tmp_path: Path, secret_env: None):
    """A `${VAR}` in a typed field (a swapped variable name) was quoted cut to 57
    characters before it was masked: a long key showed its first 56, and a value holding
    both quotes showed whole (`repr`'s `\\'` was no form of it). The problem now shows
    `***` and says which variable it came from, as written."""
    problems = load(broken_project(tmp_path)).problems
    text = "\n".join(f"{p.message} {p.hint}" for p in problems)
    by_field = {p.message.split(":")[0]: p.message for p in problems}
    got = f"got '{MASK}' (the value of ${{LONG_KEY}})"
    assert by_field["timeout"] == f"timeout: expected a number, {got}"
    assert by_field["actions.a.method"].endswith(got)  # a literal's choices, too
    assert f"got ['{MASK}'] (the value of ${{LONG_KEY}})" in text  # inside a list as well
    assert by_field["models.general.max_retries"].endswith(f"got '{MASK}' (the value of ${{QPW}})")
    for secret in (LONG_KEY, QUOTED, repr(QUOTED)[1:-1]):
        assert pieces(secret, text) == [], secret


def test_a_literal_credential_is_masked_before_it_is_quoted_and_cut(
    tmp_path: Path, secret_env: None
):
    """A value that is not interpolated is quoted, masked first: a credential written in
    the file (longer than the cut) shows as `***`, no prefix of it."""
    problems = load(broken_project(tmp_path)).problems
    message = next(p.message for p in problems if p.message.startswith("models.other.api_key"))
    assert message.endswith(f"got ['{MASK}']")
    assert pieces(LITERAL, message) == []


def test_ci_annotations_hold_no_piece_of_a_secret(tmp_path: Path, secret_env: None):
    """`fim validate --format github` ends up in CI logs."""
    result = CliRunner().invoke(
        app, ["validate", "--project", str(broken_project(tmp_path)), "--format", "github"]
    )
    assert "::error file=connectors/c.yaml" in result.output
    for secret in (LONG_KEY, QUOTED, LITERAL):
        assert pieces(secret, result.output) == [], secret


# --------------------------------------------------------------------------- finding 6

KEY = "sk-ant-api03-" + "Xy7Qw9Er2Ty5Ui8Op1As4Df6Gh3Jk0Lz" * 3 + "-AbCdEf"  # 119 characters


def base64_pieces(secret: str, text: str) -> list[str]:
    """Parts of the base64 of `secret` (8 characters of a body, any alignment) that `text`
    shows with its line breaks taken out: a decoder reads wrapped lines whole."""
    joined = text.replace("\r", "").replace("\n", "")
    found = []
    for shift in range(3):
        body = base64.b64encode(b"\0" * shift + secret.encode()).decode()[4:-4]
        found += [body[i : i + 8] for i in range(len(body) - 8) if body[i : i + 8] in joined]
    return found


def wrapped(data: bytes, width: int, newline: str) -> str:
    encoded = base64.b64encode(data).decode()
    return newline.join(encoded[i : i + width] for i in range(0, len(encoded), width)) + newline


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("width", [64, 76, 17], ids=["pem", "mime", "narrow"])
@pytest.mark.parametrize("before", [b"", b"u", b"us", b"user:"], ids=["0", "1", "2", "user"])
def test_base64_wrapped_over_lines_is_masked(newline: str, width: int, before: bytes):
    """`base64.encodebytes`, the `base64` CLI and PEM break every 76 or 64 characters: no
    line holds a whole form, so the key printed that way came out whole."""
    masker = Masker([KEY])
    text = "stdout:\n" + wrapped(before + KEY.encode() + b"\n", width, newline) + "exit 0"
    masked = masker.text(text)
    assert MASK in masked and base64_pieces(KEY, masked) == []
    assert masked.startswith("stdout:\n") and masked.endswith("exit 0")
    assert masker.contains(text)


def test_the_shape_the_attack_printed_is_masked():
    """`print(base64.encodebytes(key).decode())` from a sandboxed program."""
    masker = Masker([KEY])
    printed = base64.encodebytes(KEY.encode()).decode()
    assert len(printed.splitlines()) == 3  # wrapped: the case the masker missed
    assert base64_pieces(KEY, masker.text(printed)) == []
    assert base64_pieces(KEY, masker.value({"stdout": printed})["stdout"]) == []


def test_hex_of_a_secret_is_masked_in_either_case():
    masker = Masker([KEY])
    for form in (KEY.encode().hex(), KEY.encode().hex().upper()):
        assert masker.text(f"key: {form}.") == f"key: {MASK}."


def test_python_quoting_of_a_secret_is_masked():
    """`f"{value!r}"` escapes `'` when the text holds a `"` too, and `ascii()` escapes
    every non-ASCII letter: neither was a form."""
    secret = "pa'ss\"wörd-2718"
    masker = Masker([secret])
    for shown in (repr(secret), ascii(secret), repr(f'"{secret}'), repr([secret, '"'])):
        assert pieces(secret, masker.text(shown)) == [], shown


def test_a_stream_masks_wrapped_base64_and_lets_prose_through_word_by_word():
    """Tokens: the block is held until it is whole. Prose is not held longer than its
    last word: no form holds a space, so no secret goes on past one."""
    masker = Masker([KEY])
    text = "here: " + base64.encodebytes(KEY.encode()).decode() + "and the rest of the answer"
    for size in (1, 3, 10):
        stream = StreamMasker(masker)
        out = "".join(stream.feed(text[i : i + size]) for i in range(0, len(text), size))
        out += stream.flush()
        assert out == masker.text(text) and base64_pieces(KEY, out) == []
    stream = StreamMasker(masker)
    assert [stream.feed(word) for word in ("some ", "plain ", "wor", "ds ")] == [
        "some ",
        "plain ",
        "",
        "words ",
    ]


def test_a_cut_never_shows_a_piece_of_wrapped_base64():
    """`Masker.head`/`tail` look far enough past the cut to see a block whole, wherever
    the cut falls in it."""
    masker = Masker([KEY])
    block = wrapped(KEY.encode(), 76, "\n")
    for pad in range(0, 200, 7):
        text = "x" * pad + "\n" + block + "y" * 300
        for at in range(pad, pad + len(block) + 2, 5):
            head, _ = masker.head(text, at)
            assert base64_pieces(KEY, head) == [], (pad, at)
            tail, _ = masker.tail(text, len(text) - at - 1)
            assert base64_pieces(KEY, tail) == [], (pad, at)


def test_the_process_masker_knows_the_new_forms():
    remember([KEY])
    assert known().text(KEY.encode().hex()) == MASK
    assert base64_pieces(KEY, known().text(base64.encodebytes(KEY.encode()).decode())) == []
