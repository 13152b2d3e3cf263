"""Bad project files get located problems, never a traceback (a fuzz of the compile).

The standard: whatever a project's files hold, `compile_project` (what `fim validate` and a
server's hot reload run) either succeeds or raises `ConfigError` whose every problem names a
file, a line and a column; `fim validate` exits 1 and prints one `path:line:col: message`
line per problem, never a traceback. The property tests start from real valid projects (the
repository's example project, the `fim init` scaffold, the tests' minimal fixture) and
mutate one file, its data or its bytes, or the folders around it. Each finding they (or a
hand-written case) turned up is pinned below by a plain example test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fim.build.compile import compile_project
from fim.errors import ConfigError, Problem
from tests.inprocess_cli import run_fim

REPO = Path(__file__).resolve().parents[2]
BASES = {
    "example": REPO,
    "scaffold": REPO / "fim" / "scaffold" / "project",
    "minimal": Path(__file__).parents[1] / "fixtures" / "projects" / "minimal",
}
KEPT = {"fim.yaml", "agents", "connectors", "skills", "workflows", "hooks", "evals"}
FOLDERS = ("agents", "connectors", "skills", "workflows", "hooks", "evals")
LINE = re.compile(r"^[^\n]+:\d+:\d+: \S")
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _copy(src: Path, dst: Path) -> Path:
    """A valid project's files (modes kept: the example's hook script is executable)."""
    dst.mkdir(parents=True)
    for name in sorted(os.listdir(src)):
        if name in KEPT:
            if (src / name).is_dir():
                shutil.copytree(src / name, dst / name, symlinks=True)
            else:
                shutil.copy2(src / name, dst / name)
    return dst


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {name: _copy(src, root / name) for name, src in BASES.items()}


@contextlib.contextmanager
def _fresh(base: Path) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(dir=base.parent))
    try:
        yield _copy(base, work / "p")
    finally:
        for path in work.rglob("*"):  # a mutation may have made a folder unreadable
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    os.chmod(path, 0o755)
        shutil.rmtree(work, ignore_errors=True)


def compiled_problems(root: Path) -> list[Problem]:
    """The problems `fim validate` reports: the compile's, or the broken skills' (a
    compile that succeeds keeps those aside, so only the agents using one fail)."""
    try:
        snapshot = compile_project(root)
    except ConfigError as exc:
        return exc.problems
    return [p for found in snapshot.broken_skills.values() for p in found]


def assert_located(problems: list[Problem]) -> None:
    for p in problems:
        assert p.path and p.line >= 1 and p.column >= 1, p
        assert "Traceback" not in p.message and " failed: " not in p.message, p
        assert "\n" not in str(p), p


def assert_cli_clean(root: Path) -> None:
    result = run_fim("validate", "--project", str(root))
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    if result.returncode == 0:
        return
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stdout.splitlines()
    assert lines, result.stderr
    *found, summary = lines
    assert re.fullmatch(r"\d+ problems? in \d+ files?", summary), summary
    for line in found:
        assert LINE.match(line), line


# ------------------------------------------------------------------ mutations

HOSTILE_TEXT = [
    "re:(", "regex:(", "[", "{{", "{{ x", "{% for %}", "{{ x | nosuch }}",
    "{% include 'prompts/x.md' %}", "{{ ''.__class__ }}",
    "{{ " + "(" * 300 + "1" + ")" * 300 + " }}", "{{ " + "a + " * 600 + "1 }}",
    "${", "${NOPE}", "${A:-}", "a:b:c", ":", "os:system", "nosuch:fn",
    "../../etc/passwd", "/dev/zero", "a\0b", "\0", "x" * 5000, "1x", "",
    "http://[::1", "file:///etc/passwd", "é\u202e\u2028", "\x01\x7f", "..", "/", "*",
    "nosuch/model", "./hooks/" + "a" * 300 + ".sh", "cases.csv", "c\0.jsonl",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**64, -1, 0, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(HOSTILE_TEXT),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=40),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _paths(obj: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if len(at) > 20:  # inside a value an earlier mutation nested deep
        return
    if isinstance(obj, dict):
        for key, item in obj.items():
            yield from _paths(item, (*at, key))
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _paths(item, (*at, i))


def _mutate_data(draw: Callable[..., Any], data: Any) -> Any:
    """One change at one place of the parsed file: a new value, a key dropped or added,
    a value wrapped in a list or nested deep."""
    at = draw(st.sampled_from(list(_paths(data))))
    op = draw(st.sampled_from(["replace", "replace", "drop", "add", "wrap", "deep"]))
    if not at:
        return draw(VALUES) if op == "replace" else data
    parent = data
    for step in at[:-1]:
        parent = parent[step]
    key = at[-1]
    if op == "replace":
        parent[key] = draw(VALUES)
    elif op == "drop":
        del parent[key]
    elif op == "add" and isinstance(parent[key], dict):
        parent[key][draw(st.sampled_from(["zzz", "type", "name", "<<", "on", "1"]))] = draw(VALUES)
    elif op == "deep":
        parent[key] = _nested(draw(st.sampled_from([40, 150])))
    else:
        parent[key] = [parent[key]]
    return data


TEXT_EDITS: list[Callable[[str], str]] = [
    lambda t: "\ufeff" + t,
    lambda t: t.replace("\n", "\r\n"),
    lambda t: t.replace("  ", "\t", 1),
    lambda t: t[: len(t) // 2],
    lambda t: t + "\n---\nname: x\n",
    lambda t: "!!python/object:os.system {}\n",
    lambda t: t + "\nx: &a [*a]\n",
    lambda t: "a: &a {b: 1}\n<<: *a\n" + t,
    lambda t: "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n" + t,
    lambda t: t.replace(": ", ": !custom ", 1),
    lambda t: t.replace(": ", ": !!binary ", 1),
    lambda t: t + "\n" + "[" * 3000 + "]" * 3000 + "\n",
    lambda t: t[: len(t) // 2] + "\0" + t[len(t) // 2 :],
    lambda t: t[: len(t) // 3] + "\x85\u2028\x1b" + t[len(t) // 3 :],
    lambda t: "",
    lambda t: "null\n",
    lambda t: "[]\n",
    lambda t: "42\n",
    lambda t: t + "\nkey: 'unterminated\n",
    lambda t: t + "\n? [complex, key]\n: v\n",
    lambda t: "%YAML 1.1\n---\n" + t,
    lambda t: t.replace(": ", ": &x ", 1) + "\nagain: *x\n",
]
BYTE_EDITS: list[Callable[[bytes], bytes]] = [
    lambda b: b[: len(b) // 2] + b"\xff\xfe" + b[len(b) // 2 :],
    lambda b: "\n".join(b.decode().splitlines()).encode("utf-16"),
    lambda b: b"\xef\xbb\xbf\xef\xbb\xbf" + b,
]


def _skill_md(root: Path, text: str) -> None:
    (root / "skills" / "zz").mkdir(parents=True, exist_ok=True)
    (root / "skills" / "zz" / "SKILL.md").write_text(text)


def _bad_name(root: Path, folder: str, suffix: str) -> None:
    (root / folder).mkdir(exist_ok=True)
    with open(os.path.join(os.fsencode(root / folder), b"\xff" + suffix.encode()), "wb") as fh:
        fh.write(b"description: x\n")


def _replace_folder(root: Path, folder: str, link: bool) -> None:
    """The folder becomes a file, or a link to itself."""
    shutil.rmtree(root / folder)
    if link:
        os.symlink(folder, root / folder)
    else:
        (root / folder).write_text("x")


def _self_linked_skill(root: Path) -> None:
    (root / "skills" / "zz").mkdir(parents=True)
    os.symlink("SKILL.md", root / "skills" / "zz" / "SKILL.md")


FS_EDITS: list[Callable[[Path, str], object]] = [
    lambda root, folder: (root / folder / "zz.yaml").mkdir(parents=True),
    lambda root, folder: os.symlink("zz.yaml", root / folder / "zz.yaml"),
    lambda root, folder: os.symlink("nope.yaml", root / folder / "zz.yaml"),
    lambda root, folder: (root / folder / "zz.yaml").write_text(""),
    lambda root, folder: (root / folder / "zz.json").write_text("{}"),
    lambda root, folder: (root / folder / "zz.py").write_text("x = (\n"),
    lambda root, folder: os.mkfifo(root / folder / "zz.yaml"),
    lambda root, folder: _bad_name(root, folder, ".yaml"),
    lambda root, folder: _bad_name(root, folder, ".py"),
    lambda root, folder: _replace_folder(root, folder, link=False),
    lambda root, folder: _replace_folder(root, folder, link=True),
    lambda root, folder: _skill_md(root, "no front matter"),
    lambda root, folder: _skill_md(root, "---\nname: [\n---\nbody"),
    lambda root, folder: _skill_md(root, "---\n- a list\n---\n"),
    lambda root, folder: _self_linked_skill(root),
    lambda root, folder: (root / "fim.yaml").write_text('paths: {agents: "a\\0b"}\n'),
]


def _yaml_files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and (p.suffix in (".yaml", ".yml") or p.name == "SKILL.md")
    )


def _apply(draw: Callable[..., Any], root: Path) -> None:
    """One mutation of the project at `root`, drawn."""
    kind = draw(st.sampled_from(["data", "data", "text", "bytes", "fs"]))
    if kind == "fs":
        folder = draw(st.sampled_from(FOLDERS))
        (root / folder).mkdir(exist_ok=True)
        draw(st.sampled_from(FS_EDITS))(root, folder)
        return
    path = root / draw(st.sampled_from(_yaml_files(root)))
    if kind == "bytes":
        path.write_bytes(draw(st.sampled_from(BYTE_EDITS))(path.read_bytes()))
    elif kind == "text" or path.name == "SKILL.md":
        path.write_text(draw(st.sampled_from(TEXT_EDITS))(path.read_text()))
    else:
        data = yaml.safe_load(path.read_text())
        for _ in range(draw(st.integers(1, 3))):
            data = _mutate_data(draw, data)
        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))


# ------------------------------------------------------------------ properties


@FUZZ
@given(st.data())
def test_a_mutated_project_compiles_or_reports_located_problems(
    bases: dict[str, Path], data: st.DataObject
) -> None:
    base = bases[data.draw(st.sampled_from(sorted(bases)))]
    with _fresh(base) as root:
        _apply(data.draw, root)
        assert_located(compiled_problems(root))


@settings(FUZZ, max_examples=20)
@given(st.data())
def test_fim_validate_on_a_mutated_project_prints_one_located_line_per_problem(
    bases: dict[str, Path], data: st.DataObject
) -> None:
    base = bases[data.draw(st.sampled_from(sorted(bases)))]
    with _fresh(base) as root:
        _apply(data.draw, root)
        assert_cli_clean(root)


def test_the_base_projects_are_valid(bases: dict[str, Path]) -> None:
    for base in bases.values():
        assert compiled_problems(base) == []


# ------------------------------------------------------------------ findings


@pytest.fixture
def project(bases: dict[str, Path]) -> Iterator[Path]:
    with _fresh(bases["example"]) as root:
        yield root


def only(root: Path) -> list[str]:
    problems = compiled_problems(root)
    assert_located(problems)
    return [str(p) for p in problems]


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_skill_md_linked_to_itself_is_a_symlink_loop_problem(project: Path) -> None:
    """Was: RuntimeError("Symlink loop from ...") from Path.resolve (Python 3.11)."""
    (project / "skills" / "zz").mkdir()
    os.symlink("SKILL.md", project / "skills" / "zz" / "SKILL.md")
    assert only(project) == [
        "skills/zz/SKILL.md:1:1: symlink loop (the link points back to itself) "
        "(replace the symlink with the file it should point to)"
    ]
    assert_cli_clean(project)


def test_a_nul_in_a_folder_of_paths_is_a_problem_of_fim_yaml(project: Path) -> None:
    """Was: ValueError("embedded null byte") from os.scandir."""
    (project / "fim.yaml").write_text('paths: {agents: "a\\0b"}\n')
    found = only(project)
    assert "fim.yaml:1:17: paths.agents: a folder name cannot contain a NUL character" in found


@pytest.mark.parametrize("folder, suffix", [("agents", ".yaml"), ("hooks", ".py")])
def test_a_file_name_that_is_not_utf8_is_a_problem(project: Path, folder: str, suffix: str) -> None:
    """Was: UnicodeEncodeError (surrogates not allowed) hashing the name into the
    snapshot version (the loader's read, the hooks folder's module pins)."""
    _bad_name(project, folder, suffix)
    assert only(project) == [
        f"{folder}/\\xff{suffix}:1:1: file name is not valid UTF-8 (rename it)"
    ]
    assert_cli_clean(project)


def test_a_skill_folder_whose_name_is_not_utf8_is_a_problem(project: Path) -> None:
    os.mkdir(os.path.join(os.fsencode(project / "skills"), b"\xff"))
    assert only(project) == ["skills/\\xff:1:1: file name is not valid UTF-8 (rename it)"]


def test_a_nul_in_a_case_file_name_is_a_problem_at_the_name(project: Path) -> None:
    """Was: ValueError("embedded null byte") from os.path.realpath."""
    (project / "evals" / "zz.yaml").write_text('agent: demo\ncases: "c\\0.csv"\n')
    assert only(project) == [
        "evals/zz.yaml:2:8: case file name contains a NUL character (remove it)"
    ]


def test_a_case_line_nested_thousands_deep_is_invalid_json(project: Path) -> None:
    """Was: RecursionError from json.loads."""
    (project / "evals" / "zz.yaml").write_text("agent: demo\ncases: c.jsonl\n")
    (project / "evals" / "c.jsonl").write_text('{"input": "hi"}\n' + "[" * 5000 + "\n")
    assert only(project) == [
        "evals/c.jsonl:2:1: invalid JSON: nested too deeply (one case object per line)"
    ]


@pytest.mark.parametrize(
    "template",
    [
        "{{ " + "(" * 500 + "inputs.order_id" + ")" * 500 + " }}",  # the parser recursed
        "{% if 1 %}" * 300 + "{% endif %}" * 300,
        "{{ " + "inputs.order_id + " * 2000 + "1 }}",  # parsed; the reference walk recursed
    ],
    ids=["parentheses", "if-blocks", "a-sum"],
)
def test_a_template_nested_too_deep_is_a_problem_at_the_string(
    project: Path, template: str
) -> None:
    """Was: RecursionError from jinja2's parser, or from the walk over a tree it built."""
    replace(project / "workflows" / "refund.yaml", '"{{ inputs.order_id }}"}', f'"{template}"}}')
    assert only(project) == [
        "workflows/refund.yaml:10:16: invalid Jinja2 template: nested more than 100 deep "
        "(check {{ }} / {% %} pairs and filter names)"
    ]


def test_a_template_a_hundred_deep_is_still_valid(project: Path) -> None:
    """What people write (a few levels) and then some is unchanged."""
    deep = "{{ " + "(" * 20 + "inputs.order_id" + ")" * 20 + " }}"
    replace(project / "workflows" / "refund.yaml", '"{{ inputs.order_id }}"}', f'"{deep}"}}')
    assert only(project) == []


@pytest.mark.parametrize(
    "command, shown",
    [
        ('"./hooks/check\\0.sh"', "./hooks/check\\x00.sh"),  # was ValueError: embedded null byte
        ("./hooks/" + "a" * 300 + ".sh", "./hooks/" + "a" * 300 + ".sh"),  # was ENAMETOOLONG
    ],
    ids=["nul", "too-long"],
)
def test_a_hook_command_the_system_cannot_name_is_not_found(
    project: Path, command: str, shown: str
) -> None:
    replace(
        project / "agents" / "support.yaml", "command: ./hooks/check_crm.sh", f"command: {command}"
    )
    assert only(project) == [
        f"agents/support.yaml:22:14: hook command '{shown}' not found "
        "(paths are relative to the project root)"
    ]


def test_instructions_including_a_prompt_linked_to_itself_say_symlink_loop(project: Path) -> None:
    """Was: "RuntimeError: Symlink loop from '/abs/path/p.md'"."""
    os.symlink("p.md", project / "p.md")
    replace(project / "agents" / "support.yaml", "{{ project.name }}", "{% include 'p.md' %}")
    assert only(project) == [  # at the include's line of the `|` block (newcomer-48 #6)
        "agents/support.yaml:5:44: instructions: cannot include 'p.md': symlink loop "
        "(the link points back to itself)"
    ]


def test_a_hook_module_that_calls_sys_exit_is_a_problem(project: Path) -> None:
    """Was: SystemExit out of the compile: `fim validate` exited 3 saying nothing, and a
    server's hot reload ended the server. Now a problem at the hook that imports it."""
    (project / "hooks" / "redact.py").write_text("raise SystemExit(3)\n")
    assert only(project) == [
        "agents/support.yaml:24:5: agent 'support' hooks[3]: python hook module redact.py "
        "failed to import: SystemExit: 3, at hooks/redact.py:1"
    ]
    result = run_fim("validate", "--project", str(project))
    assert result.returncode == 1 and "failed to import: SystemExit: 3" in result.stdout


def test_a_control_character_is_one_line_at_its_place(project: Path) -> None:
    """Was: `skills/zz/SKILL.md:2:1: YAML error: unacceptable character #x001b: control
    characters are not allowed` + a second line `in "<unicode string>", position 82`
    (libyaml's reader error has no mark: quoted whole, at the document's start)."""
    _skill_md(project, "---\nname: zz\ndescription: é \x1b\n---\nbody")
    assert only(project) == [
        "skills/zz/SKILL.md:3:16: YAML error: unacceptable character #x001b: control "
        'characters are not allowed (remove it, or write it as "\\x1b" inside a '
        "double-quoted string)"
    ]
    assert_cli_clean(project)


def test_a_key_with_a_line_break_is_quoted_on_one_line(project: Path) -> None:
    """Was: `agents/demo.yaml:4:1: unknown key '` + a line `' (valid keys: ...)`: `fim
    validate`'s one line per problem broke, and an escape sequence reached the terminal."""
    (project / "agents" / "demo.yaml").write_text(
        (project / "agents" / "demo.yaml").read_text() + '"\\n": 1\n"\\e[2J": 2\n'
    )
    found = only(project)
    assert [line.split(" (valid keys")[0] for line in found] == [
        "agents/demo.yaml:8:1: unknown key '\\n'",
        "agents/demo.yaml:9:1: unknown key '\\x1b[2J'",
    ]
    assert_cli_clean(project)


def test_a_project_in_a_folder_whose_name_is_not_utf8_is_valid(bases: dict[str, Path]) -> None:
    """Was: "cannot build hook: UnicodeEncodeError" on the example's Python hook (the
    modules' digest hashed the root's name), a valid project refused."""
    work = Path(tempfile.mkdtemp(dir=bases["example"].parent))
    try:
        root = _copy(bases["example"], work / os.fsdecode(b"\xff") / "p")
        assert compiled_problems(root) == []
    finally:
        shutil.rmtree(work)
