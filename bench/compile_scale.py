"""How compile time grows with project size: 100, 1,000 and 5,000 agents.

Generates projects in a temp dir (each agent with a connector, every tenth agent with a
workflow), compiles each with `fim.build.compile.compile_project` and prints the total time, the
time per declaration and the growth ratio of that per-declaration time against the
smallest size (about 1.0 means linear growth). Each size is compiled three times (the
median is printed) after a warm-up compile, so one-time import costs are not counted.
Not a timed test: it prints what one run measured on this machine.

The `fim validate` row runs the whole command (a process of its own: interpreter, imports,
load, compile) on a 10,000-agent project: the issue's target is under 5 s.

    python bench/compile_scale.py [SIZES...]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fim_command, run_timed

from fim.build.compile import compile_project

AGENT = """description: Agent {i} answers questions about area {i}
model: general
instructions: |
  You are agent {i} of {{{{ project.name }}}}. Be brief.
tools: [calculator]
connectors: [api_{i}]
skills: [howto]
max_iterations: 10
hooks:
  - use: truncate
    with: {{max_chars: 4000}}
"""

CONNECTOR = """kind: http
description: API {i}
base_url: ${{API_URL:-http://127.0.0.1:9000}}/v{i}
auth: {{type: bearer, token: "${{API_TOKEN:-dev}}"}}
actions:
  get_item:
    description: Fetch an item
    path: /items/{{id}}
    parameters: {{type: object, properties: {{id: {{type: string}}}}, required: [id]}}
"""

WORKFLOW = """description: Workflow {i}
inputs: {{item: {{type: string}}}}
nodes:
  fetch:
    {{type: connector, connector: api_{i}, action: get_item, args: {{id: "{{{{ inputs.item }}}}"}}}}
  check: {{type: condition, needs: [fetch], if: "{{{{ nodes.fetch.output.ok }}}}", then: ask}}
  ask: {{type: agent, agent: agent_{i}, input: "Explain {{{{ nodes.fetch.output }}}}"}}
outputs: {{answer: "{{{{ nodes.ask.output }}}}"}}
"""


def generate(root: Path, agents: int) -> int:
    """Write a project with `agents` agents; returns the number of declaration files."""
    for folder in ("agents", "connectors", "workflows", "skills/howto"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text("name: scale\nmodels: {general: openai/gpt-4o-mini}\n")
    (root / "skills/howto/SKILL.md").write_text("---\ndescription: How to\n---\nSteps.\n")
    files = 2
    for i in range(agents):
        (root / f"agents/agent_{i}.yaml").write_text(AGENT.format(i=i))
        (root / f"connectors/api_{i}.yaml").write_text(CONNECTOR.format(i=i))
        files += 2
        if i % 10 == 0:
            (root / f"workflows/flow_{i}.yaml").write_text(WORKFLOW.format(i=i))
            files += 1
    return files


def main(sizes: list[int], runs: int = 3) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), 5)
        compile_project(tmp)  # one-time costs (imports, validator builds) are not per-decl
    base_per_decl = None
    print(f"median of {runs} compiles per size")
    print(
        f"{'agents':>7} {'files':>7} {'wall s':>9} {'cpu s':>9} {'ms/decl':>9} {'growth':>7} "
        f"{'recompile cpu s':>15}"
    )
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            files = generate(Path(tmp), size)
            times, cpu_times = [], []
            for _ in range(runs):
                forget_parsed_files()  # a cold compile, as `fim validate` does
                start, cpu_start = time.perf_counter(), time.process_time()
                snapshot = compile_project(tmp)
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - cpu_start)
            agent = next(Path(tmp, "agents").iterdir())
            recompiles = []
            for i in range(runs):  # what a hot reload pays after one file changed
                text = agent.read_text().replace("description: ", f"description: edit {i} ", 1)
                agent.write_text(text)
                cpu_start = time.process_time()
                compile_project(tmp)
                recompiles.append(time.process_time() - cpu_start)
            recompile = statistics.median(recompiles)
        assert len(snapshot.agents) == size
        elapsed, cpu = statistics.median(times), statistics.median(cpu_times)
        per_decl = cpu / files
        base_per_decl = base_per_decl or per_decl
        print(
            f"{size:>7} {files:>7} {elapsed:>9.3f} {cpu:>9.3f} {per_decl * 1000:>9.3f} "
            f"{per_decl / base_per_decl:>6.2f}x {recompile:>15.3f}"
        )
    validate_process(10_000)
    print("ms/decl = CPU time per declaration file (steadier than wall time on a busy box);")
    print("growth = ms/decl relative to the smallest size (1.00x = linear);")
    print(
        "recompile = CPU of a compile after one agent file changed (median of the same number"
        " of edits; unchanged files and unchanged agents' checks reused, as on reload)"
    )


def validate_process(agents: int) -> None:
    """Wall, CPU and peak memory of a whole `fim validate` process on an `agents` project."""
    import resource

    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp), agents)
        args = fim_command("validate", "--project", tmp)
        runs = [run_timed(args) for _ in range(3)]
        for _, _, done in runs:
            if done.returncode != 0:
                sys.exit(f"fim validate failed:\n{done.stdout}{done.stderr}")
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"fim validate, {agents:,} agents ({files:,} files, a process of its own, median of 3): "
        f"{wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {peak_mb:.0f} MB (target < 5 s)"
    )


def forget_parsed_files() -> None:
    """Drop the loader's per-file and template caches so each timed compile is cold."""
    from fim.config import loader, templates

    loader._CACHE.clear()
    templates._PARSED.clear()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100, 1000, 5000])
