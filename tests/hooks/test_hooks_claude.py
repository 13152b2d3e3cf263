"""Claude Code's names and inputs for fim's tools (fim/hooks/claude.py)."""

from __future__ import annotations

import pytest

from fim.hooks.claude import from_claude, names_of, to_claude


@pytest.mark.parametrize(
    ("name", "args", "meta", "expected"),
    [
        ("shell", {"command": "ls"}, {}, ("Bash", {"command": "ls"})),
        ("file_ops", {"operation": "read", "path": "a"}, {}, ("Read", {"file_path": "a"})),
        (
            "file_ops",
            {"operation": "write", "path": "a", "content": "x"},
            {},
            ("Write", {"file_path": "a", "content": "x"}),
        ),
        ("file_ops", {"operation": "list"}, {}, ("LS", {"path": "."})),
        ("web_fetch", {"url": "http://x"}, {}, ("WebFetch", {"url": "http://x"})),
        (
            "sh__run",
            {"command": "ls"},
            {"category": "mcp", "server": "sh", "tool": "run"},
            ("mcp__sh__run", {"command": "ls"}),
        ),
        ("crm__create_lead", {"name": "Ada"}, {"category": "connector"}, None),
    ],
)
def test_fim_calls_in_claude_codes_words(name, args, meta, expected) -> None:
    assert to_claude(name, args, meta) == expected


def test_an_updated_input_in_claude_codes_words_goes_back_to_fims_arguments() -> None:
    call = {"operation": "write", "path": "a.txt", "content": "x"}
    back = from_claude("file_ops", {"file_path": "b.txt", "content": "y"}, call)
    assert back == {"operation": "write", "path": "b.txt", "content": "y"}
    assert from_claude("shell", {"command": "ls -l"}, {"command": "ls"}) == {"command": "ls -l"}


def test_matchers_are_tried_on_both_names() -> None:
    assert names_of("shell", {"command": "ls"}, {}) == ["shell", "Bash"]
    assert names_of("calculator", {}, {}) == ["calculator"]
    assert names_of(None, None, {}) == []
