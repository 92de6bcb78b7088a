"""`loadwise-dev`: the development harness's commands, from a clone (hack/ensure-tools installs
them with the harness; the loadwise wheel and image have neither).

`loadwise-dev demo` runs the whole product on a local control plane, end to end (demo.py);
`loadwise-dev up|down|status|load` keeps a local cluster to try loadwise with kubectl
(devcluster.py). `make demo` and `make cluster` run them."""

from __future__ import annotations

import argparse
import sys

from . import demo, devcluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loadwise-dev", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo_parser = sub.add_parser(
        "demo", help="local control plane + Prometheus + operator, end to end"
    )
    demo_parser.add_argument(
        "--keep", action="store_true", help="keep everything running until Ctrl-C"
    )
    state = (
        f"State (PIDs, kubeconfig, logs) in ${devcluster.STATE_VARIABLE} or "
        f"{devcluster.state_dir()}."
    )
    up_parser = sub.add_parser(
        "up",
        help="start a local cluster to try loadwise with kubectl; Ctrl-C stops everything",
        description=f"Start a local cluster to try loadwise with kubectl. {state}",
    )
    up_parser.add_argument(
        "-d", "--detach", action="store_true", help="return once it is up; stop with `down`"
    )
    up_parser.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also N real nodes: kubelets with containerd running real containers on this "
        "machine, tainted loadwise.io/real-node=true:NoSchedule (pods on them need that "
        "toleration, hostNetwork: true and imagePullPolicy: Never; images "
        "localhost/loadwise/burn:dev and the pause image are loaded)",
    )
    sub.add_parser(
        "down",
        help="stop every process of the local cluster and remove every temporary directory",
        description=state,
    )
    sub.add_parser(
        "status",
        help="what the local cluster runs, the KUBECONFIG line, nodes and their load",
        description=state,
    )
    load_parser = sub.add_parser("load", help="set a simulated node's usage, in percent")
    load_parser.add_argument("node")
    load_parser.add_argument("cpu", type=float, help="CPU usage, percent")
    load_parser.add_argument("memory", type=float, nargs="?", help="memory usage, percent")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "demo":
        return demo.main(keep=args.keep)
    directory = devcluster.state_dir()
    if args.command == "up":
        if args.real_nodes < 0:
            parser.error("--real-nodes must be 0 or more")
        return devcluster.up(directory, args.detach, args.real_nodes)
    if args.command == "down":
        return devcluster.down(directory)
    if args.command == "status":
        return devcluster.status(directory)
    return devcluster.load(directory, args.node, args.cpu, args.memory)
