"""A human node's hand-written `input_schema` is checked by `fim validate` (newcomer-53 #3).

The fields an approver may supply on resume are a JSON Schema written by hand, like a
connector action's parameters; `type: numbr` passed validate and failed the resume. It is a
problem at the node's `input_schema` now, as an `output_schema` is.
"""

from __future__ import annotations

from pathlib import Path

from tests.inprocess_cli import run_fim

WORKFLOW = """\
nodes:
  ask:
    type: human
    prompt: Refund it?
    input_schema:
      type: object
      properties: {amount: {type: numbr}}
"""


def test_an_input_schema_that_is_not_json_schema_is_a_problem_at_the_node(tmp_path: Path) -> None:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "workflows" / "refund.yaml").write_text(WORKFLOW)

    done = run_fim("validate", "--project", str(tmp_path), cwd=tmp_path, timeout=60)

    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "workflows/refund.yaml:6:7: invalid JSON Schema at properties/amount/type: 'numbr' is "
        "not valid under any of the given schemas "
        "(see https://json-schema.org/understanding-json-schema)"
    )
    fixed = WORKFLOW.replace("numbr", "number")
    (tmp_path / "workflows" / "refund.yaml").write_text(fixed)
    assert run_fim("validate", "--project", str(tmp_path), cwd=tmp_path).returncode == 0
