"""The syntax check of agent instructions skips Jinja's parser for text made only of
`{{ name.path }}` expressions; that shortcut may never call invalid text valid."""

from __future__ import annotations

import random

from jinja2 import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from fim.config.templates import PlainRefs, TemplateChecker, plain_refs, references

PIECES = ["{{", "}}", "{", "}", " ", "a", ".", "b1", "not", "in", "{%", "%}", "{#", "\n", "_", "1"]
PIECES += ["{{ a }}", "{{a.b1}}", "{{ not }}", "{{ in.a }}", "{{ a. }}", "{{ a.b > 100 }}"]
PIECES += [">", "=", "==", "<=", "!", "1.5", "100", "-"]


def plainly_valid(text: str) -> bool:
    return plain_refs(text) is not None


def jinja_accepts(env: SandboxedEnvironment, text: str) -> bool:
    try:
        env.parse(text)
    except TemplateSyntaxError:
        return False
    return True


def test_the_shortcut_never_accepts_what_jinja_rejects() -> None:
    env = SandboxedEnvironment()
    rng = random.Random(19)
    shortcut = 0
    for _ in range(4000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 9)))
        if plainly_valid(text):
            shortcut += 1
            assert jinja_accepts(env, text), repr(text)
    assert shortcut > 200  # the sample exercised the shortcut, not only the fallback


def test_typical_instructions_take_the_shortcut() -> None:
    assert plainly_valid("You are {{ agent.name }} of {{project.name}}. Be brief.")
    assert not plainly_valid("{% if x %}y{% endif %}")  # statements go to the parser
    assert not plainly_valid("{{{ a }}")  # Jinja reads `{{` + `{ a }`: parsed, rejected


def test_plain_templates_report_the_same_references_as_jinja() -> None:
    text = (
        "{{ nodes.fetch.output }} for {{inputs.item}} and {{ nodes.rank }} {{ nodes }} "
        "{{ nodes.fetch.output.amount > 100 }} {{ inputs.a <= inputs.limit }}"
    )
    plain, _ = TemplateChecker().parse(text)
    assert isinstance(plain, PlainRefs)
    ast = SandboxedEnvironment().parse(text)
    for variable in ("nodes", "inputs", "other"):
        assert references(plain, variable) == references(ast, variable)
    assert references(plain, "nodes") == {"fetch", "rank"}
    assert references(plain, "inputs") == {"item", "a", "limit"}
