"""The loader: files -> validated declarations, every problem with `path:line:col`.

Each test copies the `minimal` fixture project to tmp_path, breaks one thing, and checks
the exact problem line a user would see. Parsing runs on libyaml (PyYAML's C parser) by
default and on ruamel's pure parser with FIM_YAML_PARSER=ruamel; bad-input tests run on
both so the two give the same answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fim.config.loader import find_root, load
from fim.config.yamlio import parse
from fim.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


@pytest.fixture(params=["libyaml", "ruamel"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FIM_YAML_PARSER", "ruamel" if request.param == "ruamel" else "")
    return request.param


def problems(root: Path) -> list[str]:
    """Every problem of a load, skill folders' (kept aside for their users) included."""
    decls = load(root)
    kept = [p for found in decls.skill_problems.values() for p in found]
    return [str(p) for p in [*decls.problems, *kept]]


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# --------------------------------------------------------------------------- valid input


def test_fixture_loads_without_problems(project: Path, parser: str) -> None:
    decls = load(project)
    assert decls.problems == []
    assert set(decls.entries["agent"]) == {"helper", "scripted"}
    assert set(decls.entries["connector"]) == {"api", "db"}
    assert decls.entries["connector"]["api"].decl.kind == "http"
    assert decls.project.name == "minimal"


def test_name_defaults_to_file_stem_and_can_be_overridden(project: Path) -> None:
    write(project, "agents/other.yaml", "name: renamed\ndescription: x\n")
    decls = load(project)
    assert "renamed" in decls.entries["agent"]
    assert "other" not in decls.entries["agent"]
    assert decls.entries["agent"]["helper"].decl.name == "helper"


def test_skill_has_front_matter_body_and_sibling_files(project: Path) -> None:
    skill = load(project).entries["skill"]["howto"].decl
    assert skill.meta.description == "How to answer questions"
    assert skill.body.startswith("1. Read the question.")
    assert skill.files == ("scripts/hello.py",)
    assert skill.directory == project / "skills" / "howto"


def test_eval_data_files_are_not_suites(project: Path) -> None:
    assert set(load(project).entries["eval"]) == {"helper"}


def test_yaml_12_scalars_on_both_parsers(project: Path, parser: str) -> None:
    write(project, "agents/odd.yaml", "description: on\ninstructions: yes\nmax_iterations: 0x10\n")
    decl = load(project).entries["agent"]["odd"].decl
    assert (decl.description, decl.instructions, decl.max_iterations) == ("on", "yes", 16)


def test_find_root_walks_up_to_fim_yaml(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "skills" / "howto")
    assert find_root() == project.resolve()
    assert find_root(project) == project.resolve()


def test_find_root_without_project_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        find_root(tmp_path)
    assert "no fim.yaml in" in str(info.value)


# --------------------------------------------------------------------------- interpolation


def test_env_interpolation_defaults_and_secrets(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", "s3cret-value")
    monkeypatch.delenv("API_URL", raising=False)
    write(project, "agents/lit.yaml", "description: costs $${PRICE} or ${EMPTY-}x\n")
    decls = load(project)
    api = decls.entries["connector"]["api"].decl
    assert api.base_url == "http://127.0.0.1:9999"
    assert api.auth.token == "s3cret-value"
    assert decls.entries["agent"]["lit"].decl.description == "costs ${PRICE} or x"
    assert "s3cret-value" in decls.secrets
    assert "http://127.0.0.1:9999" not in decls.secrets  # defaults are in git, not secret


def test_a_variable_spelled_with_an_escape_is_still_expanded(
    project: Path, monkeypatch: pytest.MonkeyPatch, parser: str
) -> None:
    """Files without `${` skip the interpolation walk; a double-quoted escape can still
    spell one, and it is expanded like any other."""
    monkeypatch.setenv("SPELLED", "from-env")
    write(project, "agents/esc.yaml", 'description: "\\x24{SPELLED} and \\u0024{SPELLED}"\n')
    decls = load(project)
    assert decls.entries["agent"]["esc"].decl.description == "from-env and from-env"


def test_missing_env_var_names_variable_and_position(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRM_TOKEN", raising=False)
    write(
        project,
        "connectors/crm.yaml",
        'kind: http\nbase_url: http://x\nauth:\n  type: bearer\n  token: "${CRM_TOKEN}"\n',
    )
    decls = load(project)  # in a connector it makes only the connector unavailable
    assert decls.problems == []
    assert [str(p) for p in decls.unavailable["connector"]["crm"]] == [
        "connectors/crm.yaml:5:10: environment variable 'CRM_TOKEN' is not set "
        "(export CRM_TOKEN=..., or write ${CRM_TOKEN:-} while developing; never a value "
        "there: it would be a secret in git)"
    ]


def test_secret_values_are_masked_in_problems(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_IT", "topsecretvalue")
    write(project, "agents/bad.yaml", "max_iterations: ${MAX_IT}\n")
    [line] = problems(project)
    assert "topsecretvalue" not in line
    assert line.startswith("agents/bad.yaml:1:17: max_iterations: expected an integer, got '***'")


# --------------------------------------------------------------------------- bad input


def test_tab_indented_file(project: Path, parser: str) -> None:
    write(project, "agents/tabs.yaml", "description: x\nhooks:\n\t- use: confirm\n")
    [line] = problems(project)
    assert line.startswith("agents/tabs.yaml:3:1: YAML syntax error: tab character")


def test_duplicate_key_is_reported_at_the_second_key(project: Path, parser: str) -> None:
    write(project, "agents/dup.yaml", "description: a\nmodel: general\ndescription: b\n")
    assert problems(project) == [
        "agents/dup.yaml:3:1: duplicate key 'description' (first defined on line 1; keep only one)"
    ]


def test_unknown_key_has_did_you_mean(project: Path, parser: str) -> None:
    write(project, "agents/typo.yaml", "description: x\nconectors: [api]\n")
    assert problems(project) == [
        "agents/typo.yaml:2:1: unknown key 'conectors' (did you mean 'connectors'?)"
    ]


def test_unknown_key_in_nested_union_member(project: Path) -> None:
    write(
        project,
        "connectors/c.yaml",
        "kind: http\nbase_url: http://x\nauth: {type: bearer, tokn: abc}\n",
    )
    assert problems(project) == [
        "connectors/c.yaml:3:7: auth: missing required field 'token'",
        "connectors/c.yaml:3:22: unknown key 'tokn' (did you mean 'token'?)",
    ]


def test_wrong_type(project: Path, parser: str) -> None:
    write(project, "agents/wrong.yaml", "description: x\nmax_iterations: many\n")
    assert problems(project) == [
        "agents/wrong.yaml:2:17: max_iterations: expected an integer, got 'many'"
    ]


def test_wrong_literal_suggests_the_closest_value(project: Path) -> None:
    write(project, "agents/eng.yaml", "engine: recat\n")
    assert problems(project) == [
        "agents/eng.yaml:1:9: engine: expected one of 'react' or 'dag', got 'recat' "
        "(did you mean 'react'?)"
    ]


def test_missing_required_field(project: Path, parser: str) -> None:
    write(project, "connectors/nourl.yaml", "kind: http\ndescription: no url\n")
    assert problems(project) == ["connectors/nourl.yaml:1:1: missing required field 'base_url'"]


def test_unknown_workflow_node_type(project: Path) -> None:
    write(project, "workflows/w.yaml", "nodes:\n  a: {type: lmm, prompt: hi}\n  b: {prompt: x}\n")
    assert problems(project) == [
        "workflows/w.yaml:2:13: nodes.a: unknown type 'lmm' (did you mean 'llm'?)",
        "workflows/w.yaml:3:6: nodes.b: missing 'type' (set type to one of: llm, agent, "
        "connector, database, mcp, tool, condition, human)",
    ]


def test_empty_file(project: Path, parser: str) -> None:
    write(project, "agents/empty.yaml", "")
    write(project, "connectors/comments.yaml", "# nothing here yet\n")
    assert problems(project) == [
        "agents/empty.yaml:1:1: empty file (expected a mapping of agent fields)",
        "connectors/comments.yaml:1:1: empty file (expected a mapping of connector fields)",
    ]


def test_non_utf8_file_points_at_the_bad_byte(project: Path) -> None:
    write(project, "agents/latin1.yaml", b"description: ok\ninstructions: caf\xe9\n")
    assert problems(project) == [
        "agents/latin1.yaml:2:18: file is not valid UTF-8 (byte 0xe9) (save the file as UTF-8)"
    ]


def test_list_instead_of_mapping(project: Path, parser: str) -> None:
    write(project, "agents/list.yaml", "- description: x\n- model: general\n")
    assert problems(project) == [
        "agents/list.yaml:1:1: expected a mapping of agent fields, got a list "
        "(write `key: value` lines at the top level)"
    ]


def test_symlink_loop_is_reported_not_followed(project: Path) -> None:
    os.symlink("loop.yaml", project / "agents" / "loop.yaml")
    os.symlink(project / "skills", project / "skills" / "howto" / "self")
    os.symlink("missing.yaml", project / "connectors" / "gone.yaml")
    assert problems(project) == [
        "agents/loop.yaml:1:1: symlink loop (the link points back to itself) "
        "(replace the symlink with the file it should point to)",
        "connectors/gone.yaml:1:1: broken symlink to 'missing.yaml' (fix or remove the link)",
    ]
    # the skill still loads; the symlinked directory inside it is not walked into
    assert load(project).entries["skill"]["howto"].decl.files == ("scripts/hello.py",)


def test_symlinked_file_is_followed(project: Path, tmp_path: Path) -> None:
    shared = write(tmp_path, "shared/agent.yaml", "description: shared agent\n")
    os.symlink(shared, project / "agents" / "linked.yaml")
    assert load(project).entries["agent"]["linked"].decl.description == "shared agent"


def test_a_skill_md_that_is_no_regular_file_is_a_problem_not_a_read(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skill from the wild is a folder someone else made: its SKILL.md linked to
    `/dev/zero` was read until memory ran out, and a FIFO blocked the load (a server's
    reload with it) for good. Each is one problem; a file past the size cap too."""
    import fim.config.files as files

    (project / "skills" / "zero").mkdir()
    os.symlink("/dev/zero", project / "skills" / "zero" / "SKILL.md")
    (project / "skills" / "fifo").mkdir()
    os.mkfifo(project / "skills" / "fifo" / "SKILL.md")
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2**20)
    write(project, "skills/huge/SKILL.md", "---\nname: huge\ndescription: d\n---\n" + "x" * 2**20)
    assert problems(project) == [
        "skills/fifo/SKILL.md:1:1: cannot read: not a regular file (a FIFO, device or socket)",
        "skills/huge/SKILL.md:1:1: cannot read: larger than 1 MiB, the most fim reads",
        "skills/zero/SKILL.md:1:1: SKILL.md links outside its skill folder (copy the skill "
        "into the project instead of linking it: a skill's files are read and shown to the "
        "model, and nothing outside the project is)",
    ]


def test_skill_without_front_matter_or_file(project: Path) -> None:
    write(project, "skills/plain/SKILL.md", "# Just markdown\n")
    write(project, "skills/named/SKILL.md", "---\nname: other\ndescription: d\n---\nbody\n")
    write(project, "skills/nofile/README.md", "no SKILL.md here\n")
    assert problems(project) == [
        "skills/nofile/SKILL.md:1:1: skill folder has no SKILL.md "
        "(add SKILL.md with name/description front matter)",
        "skills/plain/SKILL.md:1:1: SKILL.md must start with YAML front matter between '---' "
        "lines (begin the file with ---, name: ..., description: ..., ---)",
    ]


def test_skill_front_matter_errors_point_into_the_file(project: Path) -> None:
    write(project, "skills/bad/SKILL.md", "---\nname: bad\nlicense: MIT\n---\nbody\n")
    assert problems(project) == ["skills/bad/SKILL.md:2:1: missing required field 'description'"]


def test_invalid_name(project: Path) -> None:
    write(project, "agents/spaces.yaml", "name: has spaces\n")
    assert problems(project) == [
        "agents/spaces.yaml:1:7: invalid agent name 'has spaces' "
        "(use letters, digits, '_' and '-' (at most 64 characters))"
    ]


def test_broken_project_file_does_not_stop_the_other_files(project: Path) -> None:
    write(project, "fim.yaml", "name: x\nmodels: [general]\n")
    write(project, "agents/typo.yaml", "descripton: x\n")
    assert problems(project) == [
        "fim.yaml:2:9: models: expected a mapping, got ['general']",
        "agents/typo.yaml:1:1: unknown key 'descripton' (did you mean 'description'?)",
    ]


def test_fifty_errors_are_all_reported(project: Path) -> None:
    for i in range(50):
        write(project, f"agents/a{i:02d}.yaml", f"description: agent {i}\nmax_iteration: 3\n")
    found = problems(project)
    assert len(found) == 50
    assert found[0] == (
        "agents/a00.yaml:2:1: unknown key 'max_iteration' (did you mean 'max_iterations'?)"
    )
    assert found[-1].startswith("agents/a49.yaml:2:1: unknown key 'max_iteration'")


def test_alias_bomb_is_stopped(project: Path, parser: str) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    write(project, "agents/bomb.yaml", "\n".join(lines) + "\n")
    found = problems(project)
    assert any("document expands to more than 200000 values" in line for line in found)


def test_a_big_file_of_plain_values_is_no_alias_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alias guard counts what aliases add: a connector imported from a spec of 9,000
    operations holds a million plain values and must still load (here with the guard at
    2,000 values, a file of 2,500)."""
    from fim.config import yamlio

    monkeypatch.setattr(yamlio, "MAX_VALUES", 2_000)
    doc = parse("[" + "1, " * 2_500 + "1]\n", "connectors/big.yaml")
    assert doc.problems == [] and len(doc.data) == 2_501
    bomb = parse(
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: [" + ", ".join(["*a"] * 300) + "]\n", "x"
    )
    assert "over its own size" in str(bomb.problems)


def test_recursive_alias_is_a_problem(project: Path) -> None:
    write(project, "agents/rec.yaml", "tools: &t [calculator, *t]\n")
    assert problems(project)[0].startswith("agents/rec.yaml:1:8: recursive YAML alias")


# Files come from third parties too (skills, imported connectors): no file may crash the
# load or cost more than its size, and each says what is wrong at `file:line:col`.

DEEP_HINT = "(flatten the data; an alias (*name) brings the levels of its anchor along)"


def test_nesting_past_200_levels_is_one_problem_where_it_goes_too_deep(
    project: Path, parser: str
) -> None:
    write(project, "agents/deep.yaml", "tools: " + "[" * 1000 + "]" * 1000 + "\n")
    assert problems(project) == [
        "agents/deep.yaml:1:207: nesting too deep: lists and mappings more than 200 levels "
        f"deep {DEEP_HINT}"
    ]


def test_a_skill_nested_40000_deep_is_a_problem_not_a_segfault(project: Path) -> None:
    """libyaml's composer recurses in C: 40,000 levels (80 KB) overflowed the stack and
    killed the process, a server's reload included. Run apart so a crash is a failure."""
    write(project, "skills/evil/SKILL.md", f"---\nmetadata: {'[' * 40_000}{']' * 40_000}\n---\n")
    done = subprocess.run(
        [sys.executable, "-m", "fim.cli", "validate", "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "skills/evil/SKILL.md:2:210: nesting too deep" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_aliases_stacking_anchors_past_200_levels_are_stopped_once(
    project: Path, parser: str
) -> None:
    """Each line is shallow; the data they build is 600 levels deep."""
    lines = ["a0: &a0 [x]", *(f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 600))]
    write(project, "agents/stack.yaml", "\n".join(lines) + "\n")
    deep = [line for line in problems(project) if "nesting too deep" in line]
    assert deep == [
        "agents/stack.yaml:1:5: nesting too deep: lists and mappings more than 200 levels "
        f"deep {DEEP_HINT}"
    ]


def test_a_key_written_after_a_merge_is_where_its_problem_points(
    project: Path, parser: str
) -> None:
    """The key written in the mapping wins over the merged one, in the data and in the
    position of its problem."""
    write(project, "agents/m.yaml", "description: x\n<<: {max_iterations: 3}\nmax_iterations: a\n")
    [line] = problems(project)
    assert line.startswith("agents/m.yaml:3:17: max_iterations: expected an integer, got 'a'")


def test_a_chain_of_merges_does_not_make_a_problem_cost_more_than_the_file(
    project: Path,
) -> None:
    """Ten anchors, each merging the one before ten times: 700 bytes and 10^9 ways through
    the merges, which the position of a problem after them walked one by one (for hours)."""
    lines = ["defs:", "  a0: &a0 {x: 1}"]
    lines += [f"  a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 10)}]}}" for i in range(1, 10)]
    write(project, "agents/merge.yaml", "\n".join([*lines, "<<: *a9", "max_iteration: 3"]) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "fim.cli", "validate", "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        "agents/merge.yaml:13:1: unknown key 'max_iteration' (did you mean 'max_iterations'?)"
        in done.stdout
    )


def test_positions_in_a_mapping_of_many_keys_take_linear_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A problem per key of a big mapping (an imported connector's actions) looked each key
    up from the first: 20,000 problems took 14 s. Each mapping's keys are indexed once,
    however many problems point into it."""
    from fim.config import yamlio

    text = "actions:\n" + "".join(f"  a{i}: 1\n" for i in range(2_000))
    doc = parse(text, "connectors/big.yaml")
    indexed: list[int] = []
    original = yamlio.Document._index_mapping

    def counting(self: yamlio.Document, node: object) -> object:
        indexed.append(id(node))
        return original(self, node)  # type: ignore[arg-type]

    monkeypatch.setattr(yamlio.Document, "_index_mapping", counting)
    found = [doc.position(("actions", f"a{i}")) for i in range(2_000)]
    assert found[0] == (2, 7) and found[-1] == (2_001, 10)
    assert len(indexed) == len(set(indexed)) <= 2  # the file's mapping and `actions`, once each


def test_keys_are_names_as_written(project: Path, parser: str) -> None:
    write(project, "agents/k.yaml", "1: x\ntrue: y\n")
    assert [line.split(" (")[0] for line in problems(project)] == [
        "agents/k.yaml:1:1: unknown key '1'",
        "agents/k.yaml:2:1: unknown key 'true'",
    ]


# --------------------------------------------------------------------------- reload reads


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths the loader opens from now on."""
    import builtins

    import fim.config.files as files

    opened: list[str] = []

    def counting(name, *args, **kwargs):
        opened.append(os.path.basename(name))
        return builtins.open(name, *args, **kwargs)

    monkeypatch.setattr(files, "open", counting, raising=False)
    return opened


def test_a_reload_reads_only_files_whose_stat_changed(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fim.config.files as files

    monkeypatch.setattr(files, "_RACY_NS", 0)  # utime just set every ctime to now
    hour_ago = os.stat(project / "fim.yaml").st_mtime_ns - 3600 * 10**9
    for path in project.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(hour_ago, hour_ago))
    load(project)
    opened = _reads(monkeypatch)
    agent = next((project / "agents").glob("*.yaml"))
    agent.write_text(agent.read_text() + "\n# edited\n")

    decls = load(project)
    assert opened == [agent.name], "unchanged files are trusted by their stat"
    assert not decls.problems


def test_a_file_rewritten_within_the_racy_window_is_read_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = write(project, "agents/racy.yaml", "description: aaaa\ninstructions: Hi.\n")
    before = os.stat(agent)
    assert load(project).entries["agent"]["racy"].decl.description == "aaaa"
    opened = _reads(monkeypatch)
    agent.write_text("description: bbbb\ninstructions: Hi.\n")  # same size
    os.utime(agent, ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime: a coarse tick

    decls = load(project)
    assert "racy.yaml" in opened
    assert decls.entries["agent"]["racy"].decl.description == "bbbb"


def test_a_file_copied_over_with_its_old_mtime_is_read_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cp -p` keeps an old mtime (and here the size); the change of ctime gives it away."""

    import fim.config.files as files

    monkeypatch.setattr(files, "_RACY_NS", 0)  # only the stat key can notice the change
    agent = write(project, "agents/copied.yaml", "description: aaaa\ninstructions: Hi.\n")
    old = os.stat(agent).st_mtime_ns - 3600 * 10**9
    os.utime(agent, ns=(old, old))
    assert load(project).entries["agent"]["copied"].decl.description == "aaaa"
    time.sleep(0.05)  # ctime ticks with the kernel's coarse clock
    agent.write_text("description: bbbb\ninstructions: Hi.\n")
    os.utime(agent, ns=(old, old))

    assert load(project).entries["agent"]["copied"].decl.description == "bbbb"
