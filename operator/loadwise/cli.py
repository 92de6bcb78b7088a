"""The `loadwise` command: run the operator, explain a decision, read a shadow trial's report,
print the CRD."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import gc
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

from . import logs
from .kube import prefetch

if TYPE_CHECKING:
    from .config import Config

RUN_EPILOG = """\
Every setting is an environment variable (shown with its default) and a flag; a flag overrides
its variable. An unknown LOADWISE_* variable is an error.
"""


def run(config: Config) -> int:
    # Imported here, after the start-up lists were asked for (prefetch): they take a second.
    import kopf

    from .handlers import build_registry
    from .preflight import AccessError, preflight

    # Everything imported so far (kopf, the Kubernetes client's thousands of model classes)
    # lives as long as the process: out of the collector's sight, a full collection no longer
    # walks it. bench/cycle_micro measured pods with anti-affinity at 0.30-0.39 ms per pod with
    # the client imported and 0.19 ms after this.
    gc.freeze()
    logs.setup(config.logging.level, config.logging.format)
    problem = tls_problem(config)
    if problem is not None:
        print(f"loadwise: {problem}", file=sys.stderr)
        return 1
    try:
        asyncio.run(preflight(config))
    except AccessError as exc:
        print(f"loadwise: {exc}", file=sys.stderr)
        return 1
    asyncio.run(kopf.operator(registry=build_registry(config), clusterwide=True, standalone=True))
    return 0


def tls_problem(config: Config) -> str | None:
    """Why the HTTPS port cannot use the given certificate and key, if it cannot. Checked
    before kopf starts: Runtime.start would fail on it at every retry, for ever."""
    if not (config.serving.secure_port and config.serving.tls_cert_file):
        return None
    from .secure_serving import server_tls

    try:
        server_tls(config.serving.tls_cert_file, config.serving.tls_private_key_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        return (
            f"cannot serve HTTPS with {config.serving.tls_cert_file} and "
            f"{config.serving.tls_private_key_file}: {logs.one_line(exc)}"
        )
    return None


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps at spaces only: URLs, PromQL and names like loadwise-scheduler stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(
            " ".join(text.split()), width, break_on_hyphens=False, break_long_words=False
        )


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per Config field, its help made from the field's description."""
    from .settings_help import settings  # pydantic: after prefetch.start

    group = parser.add_argument_group("settings")
    for s in settings():
        text = f"{s.description} [{s.variable}, default {s.default}]".replace("%", "%%")
        if s.is_bool:
            group.add_argument(
                s.flag, dest=s.field, action=argparse.BooleanOptionalAction, help=text
            )
        else:
            group.add_argument(s.flag, dest=s.field, metavar="VALUE", help=text)


def setting_flags(args: argparse.Namespace) -> dict[str, Any]:
    from .settings_help import settings

    return {s.field: getattr(args, s.field, None) for s in settings()}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loadwise")
    except PackageNotFoundError:  # run from a source tree without an install
        return "unknown"


def _closest_flag(words: list[str], parser: argparse.ArgumentParser) -> str:
    """ " (did you mean --x?)" for the first unknown flag with a close known one."""
    known = [o for action in parser._actions for o in action.option_strings]
    for word in words:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.8)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


def explain_target(pod: str, namespace: str | None) -> str:
    """`explain`'s NAMESPACE/POD from kubectl's forms too: `-n NS POD` and `-n NS pod/POD`."""
    if namespace is None:
        return pod
    name = pod.removeprefix("pod/").removeprefix("pods/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"with -n {namespace}, expected POD or pod/POD, not {pod!r}")
    return f"{namespace}/{name}"


async def _untaint(sweep_for: float) -> int:
    """The soft taints removed with the credentials at hand (in-cluster, or the kubeconfig),
    then again every 10 s for `sweep_for` seconds."""
    from .kube.transport import Transport
    from .preflight import connect
    from .scheduler.soft_taints import untaint_all

    api = await connect(pool_size=4)
    transport = Transport(api, pool_size=4)
    deadline = time.monotonic() + sweep_for
    try:
        while True:
            removed = await untaint_all(transport)
            joined = f": {', '.join(removed)}" if removed else ""
            print(f"soft taint removed from {len(removed)} node(s){joined}", flush=True)
            if time.monotonic() + 10 > deadline:
                return 0
            await asyncio.sleep(10)
    except Exception as exc:
        print(f"loadwise untaint: {exc}", file=sys.stderr)
        return 1
    finally:
        await transport.close()
        await api.close()


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["run"] and not {"-h", "--help"} & set(words):
        prefetch.start()
    try:
        return _main(argv)
    finally:
        prefetch.abandon_all()  # children left by a run that ended before its start-up lists


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="loadwise", description=__doc__)
    parser.add_argument("--version", action="version", version=f"loadwise {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser(
        "run",
        usage="loadwise run [--SETTING VALUE ...]",
        help="run the scheduler (settings: LOADWISE_* variables or flags; see run --help)",
        description="Run the scheduler.",
        formatter_class=_HelpFormatter,
        epilog=RUN_EPILOG,
    )
    add_setting_flags(run_parser)
    sub.add_parser("crd", help="print the SchedulingPolicy CRD generated from the model")
    untaint = sub.add_parser(
        "untaint",
        help="remove loadwise's soft taint (loadwise.io/hot) from every node: the chart's hook "
        "runs it when soft taints are turned off or the chart is uninstalled",
    )
    untaint.add_argument(
        "--for",
        dest="sweep_for",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="sweep again every 10 s for this long (a replica still stopping may taint again)",
    )
    shadow = sub.add_parser(
        "shadow",
        help="the shadow trial's report (a replica run with shadow on): where another "
        "scheduler placed pods, and where loadwise would have",
    )
    shadow.add_argument("action", choices=["report"])
    shadow.add_argument("--url", default=None, help="a replica's /shadow (default: the port "
                        "a kubectl port-forward of 10259 gives)")  # fmt: skip
    shadow.add_argument("--token-file", default="", help="a bearer token allowed to get /shadow")
    shadow.add_argument("--insecure-skip-tls-verify", action="store_true",
                        help="accept the replica's self-signed certificate")  # fmt: skip
    shadow.add_argument("--json", action="store_true", help="the report as JSON")
    explain = sub.add_parser(
        "explain",
        usage="loadwise explain NAMESPACE/POD | -n NAMESPACE POD | node/NAME [--SETTING VALUE ...]",
        help="dry run: every node's verdict and score for NAMESPACE/POD; node/NAME: whether "
        "rebalancing would relieve the node, and what would move where",
        description="A dry run of the operator's scheduling cycle for one pod: why each node "
        "was refused, each feasible node's load figures and score, the choice, and what "
        "preemption would do; for node/NAME, whether the node is over a hot threshold under "
        "each policy with rebalance enabled and which pods would move where. Nothing is "
        "bound or evicted. It reads the cluster with your "
        "kubeconfig and the metrics with the same settings as `loadwise run` (LOADWISE_* "
        "variables or the flags below): give it the operator's, e.g. --prometheus-url, or "
        "it may explain a decision the operator did not make (its last line says which "
        "settings it used).",
        formatter_class=_HelpFormatter,
    )
    explain.add_argument(
        "pod", metavar="NAMESPACE/POD | node/NAME", help="the pod or node to explain"
    )
    explain.add_argument(
        "-n", "--namespace", help="the pod's namespace, as kubectl takes it (then POD alone)"
    )
    add_setting_flags(explain)
    words = sys.argv[1:] if argv is None else argv
    if words[:1] in (["demo"], ["dev"]):
        parser.error(
            f"the {words[0]} command moved to the development harness: from a clone, "
            "`make demo` / `make cluster`, or `loadwise-dev demo|up|down|status|load`"
        )
    args, rest = parser.parse_known_args(argv)
    if rest:
        chosen = {"run": run_parser, "explain": explain}.get(args.command, parser)
        parser.error(f"unrecognized arguments: {' '.join(rest)}{_closest_flag(rest, chosen)}")
    if args.command == "crd":
        from .policies import crd

        sys.stdout.write(crd.render())
        return 0
    if args.command == "shadow":
        from . import shadow_report

        url = args.url or shadow_report.DEFAULT_URL
        verify = not args.insecure_skip_tls_verify
        return shadow_report.main(url, args.token_file, verify, args.json)
    if args.command == "untaint":
        return asyncio.run(_untaint(args.sweep_for))
    if args.command == "explain":
        from .explain import main as explain_main

        try:
            target = explain_target(args.pod, args.namespace)
        except ValueError as exc:
            explain.error(str(exc))
        return explain_main(target, setting_flags(args))
    from .config import Config

    try:
        config = Config.from_env(flags=setting_flags(args))
    except ValueError as exc:
        print(f"loadwise: {exc}", file=sys.stderr)
        return 2
    return run(config)
