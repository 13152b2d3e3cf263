"""`fim connector import` speed over generated OpenAPI specs of 100, 1,000 and 5,000
operations, in JSON and YAML: seconds, peak traced memory and microseconds per operation.
Growth should be linear (the per-operation cost stays flat as the spec grows).

    python bench/openapi_import.py [--sizes 100,1000,5000]

Not a timed test: it prints what it saw.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fim.config.schema import HttpConnector
from fim.connectors.openapi import dump_yaml, import_openapi, load_document
from fim.testing.openapi_specs import generated_spec


def _import(path: Path) -> int:
    """What `fim connector import` does (garbage collection paused, as there)."""
    gc.disable()
    try:
        decl = import_openapi(load_document(path), "bench")
        HttpConnector.model_validate(decl)
        dump_yaml(decl, path.name)
    finally:
        gc.enable()
    return len(decl["actions"])


def measure(path: Path) -> tuple[float, float, int]:
    """Seconds (untraced run) and peak traced MiB (second run: tracing slows it) of
    load + import + validate + dump, and the action count."""
    start = time.perf_counter()
    actions = _import(path)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    _import(path)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, actions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,5000")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    import yaml

    print(f"{'format':6} {'ops':>6} {'MB':>6} {'seconds':>8} {'peak MiB':>9} {'us/op':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("json", "yaml"):
            for n in sizes:
                spec = generated_spec(n)
                path = Path(tmp, f"spec{n}.{fmt}")
                if fmt == "json":
                    path.write_text(json.dumps(spec))
                else:
                    path.write_text(yaml.dump(spec, Dumper=yaml.CSafeDumper, sort_keys=False))
                seconds, peak, actions = measure(path)
                size = path.stat().st_size / 1e6
                per_op = seconds / actions * 1e6
                print(
                    f"{fmt:6} {actions:>6} {size:>6.1f} {seconds:>8.2f} {peak:>9.0f} {per_op:>7.0f}"
                )


if __name__ == "__main__":
    main()
