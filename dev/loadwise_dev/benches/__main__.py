"""`python -m loadwise_dev.benches NAME [ARGS]`: run one benchmark (its module's `main`)."""

from __future__ import annotations

import importlib
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent


def names() -> list[str]:
    return sorted(p.stem.replace("_", "-") for p in HERE.glob("*.py") if not p.stem.startswith("_"))


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(f"usage: bench/NAME [ARGS] or loadwise-bench NAME [ARGS]; NAME: {', '.join(names())}")
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    name = sys.argv[1].replace("_", "-")
    if name not in names():
        print(f"no benchmark {name!r}; there are: {', '.join(names())}", file=sys.stderr)
        sys.exit(2)
    module = f"loadwise_dev.benches.{name.replace('-', '_')}"
    sys.argv = [f"bench/{name}", *sys.argv[2:]]
    importlib.import_module("loadwise_dev.benches")  # the package, for relative imports
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
