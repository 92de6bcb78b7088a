"""The `loadwise` command: run the operator, run the demo, print the CRD."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import kopf

from . import crd
from .config import Config
from .handlers import build_registry


def run(config: Config) -> None:
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # kopf logs every handled pod event at DEBUG/INFO: keep it quiet on the hot path.
    logging.getLogger("kopf").setLevel(logging.WARNING)
    asyncio.run(kopf.operator(registry=build_registry(config), clusterwide=True, standalone=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loadwise", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the scheduler (settings from LOADWISE_* env vars)")
    demo = sub.add_parser("demo", help="local control plane + Prometheus + operator, end to end")
    demo.add_argument("--keep", action="store_true", help="keep everything running until Ctrl-C")
    sub.add_parser("crd", help="print the SchedulingPolicy CRD generated from the model")
    explain = sub.add_parser(
        "explain", help="dry run: every node's verdict and score for NAMESPACE/POD"
    )
    explain.add_argument("pod", metavar="NAMESPACE/POD")
    args = parser.parse_args(argv)
    if args.command == "crd":
        sys.stdout.write(crd.render())
        return 0
    if args.command == "explain":
        from .explain import main as explain_main

        return explain_main(args.pod)
    if args.command == "demo":
        try:  # the development harness is not in the wheel or the image
            from loadwise_dev.demo import main as demo_main
        except ImportError:
            print(
                "loadwise demo needs the development harness (loadwise_dev): run `make demo` "
                "from a clone of the repository",
                file=sys.stderr,
            )
            return 2
        return demo_main(keep=args.keep)
    try:
        config = Config.from_env()
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    run(config)
    return 0
