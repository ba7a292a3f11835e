"""What an interpreter offers the harness: run with that interpreter, it imports dlbench's backend of a framework
(so the framework and everything the backend needs) and prints one JSON line of facts (standard library and the
framework only). The workflow asks it of every interpreter a study names (software.python; dlbench.plan.interpreters)
before any job.

    PYTHONPATH=workflow /opt/site/bin/python -m dlbench.harness.probe --framework pytorch
    {"framework": "pytorch", "python": "/opt/site/bin/python", "python_version": "3.12.3",
     "framework_version": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91200, "nccl": "2.27.7", "gpus": ["NVIDIA H200"]}

Exit status 0 with the facts; 1 with {"error": "..."} when the backend cannot be imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import traceback

from .frameworks import REGISTRY


def facts(framework: str) -> dict:
    """The interpreter and its framework build: what the interpreter's runs are (their identity) and the GPUs."""
    module = importlib.import_module(REGISTRY[framework].backend_module)
    return {
        "framework": framework,
        "python": sys.executable,
        "python_version": platform.python_version(),
        **module.interpreter_facts(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.harness.probe", description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=sorted(REGISTRY), required=True)
    args = p.parse_args(argv)
    try:
        found = facts(args.framework)
    except Exception as error:  # any failure to import is the answer: this interpreter cannot run the backend
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        print(json.dumps({"error": f"cannot import dlbench's {args.framework} backend: {last}"}))
        return 1
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
