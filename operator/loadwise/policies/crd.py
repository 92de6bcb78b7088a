"""Generate the SchedulingPolicy CRD from the pydantic model (the one source of truth), as
crd_schema.py builds it, and write it as YAML.

`python -m loadwise.policies.crd --write` rewrites crds/, the chart's copy and the policy reference
(docs/policy-reference.md); a test fails when the committed files drift from what the model
generates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from . import policy_reference
from .crd_schema import build_crd

HEADER = (
    "# Generated from loadwise.policies.policy by `python -m loadwise.policies.crd --write`."
    " Do not edit.\n"
)
TARGETS = ("crds/schedulingpolicies.yaml", "charts/loadwise/crds/schedulingpolicies.yaml")


def render() -> str:
    return HEADER + yaml.dump(build_crd(), Dumper=_NoAliases, sort_keys=False, width=100)


class _NoAliases(yaml.SafeDumper):
    """Repeated parts written out in full: no `&id001` anchors for a reader to chase."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--write", action="store_true", help="rewrite the committed CRD files and reference"
    )
    parser.add_argument("--root", default=".", help="repository root (for --write)")
    args = parser.parse_args(argv)
    text = render()
    if not args.write:
        sys.stdout.write(text)
        return 0
    outputs = {target: text for target in TARGETS}
    outputs[policy_reference.TARGET] = policy_reference.render()
    for target, content in outputs.items():
        path = Path(args.root) / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
