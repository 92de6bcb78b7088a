"""Start-up checks of the credentials and permissions, before kopf and the Runtime start.

Without them a missing kubeconfig, a rejected token (401) or missing RBAC (403) showed up as a
traceback from deep inside start-up, retried for ever. These are configuration mistakes that no
retry fixes, so `loadwise run` and `loadwise explain` stop with one line that says which.
An unreachable API server is not one of them: start-up retries that by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from .config import Config
from .runtime import api_client
from .transport import Transport

log = logging.getLogger(__name__)

# (verb, group, resource, subresource): what start-up and scheduling need (the chart's
# ClusterRole grants these and more); Leases are checked in the lease namespace.
NEEDED: tuple[tuple[str, str, str, str], ...] = (
    *(
        (verb, group, resource, "")
        for resource, group in (
            ("nodes", ""),
            ("pods", ""),
            ("namespaces", ""),
            ("services", ""),
            ("replicationcontrollers", ""),
            ("replicasets", "apps"),
            ("statefulsets", "apps"),
            ("schedulingpolicies", "loadwise.io"),
        )
        for verb in ("list", "watch")
    ),
    ("create", "", "pods", "binding"),
    ("create", "", "events", ""),
)
LEASES: tuple[tuple[str, str, str, str], ...] = tuple(
    (verb, "coordination.k8s.io", "leases", "") for verb in ("get", "create", "update")
)


class AccessError(Exception):
    """A configuration problem with the credentials or their permissions: retrying won't help."""


def credentials_source() -> str:
    """Where the credentials come from, as a user would name it."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "the pod's service account"
    if os.environ.get("KUBECONFIG"):
        return f"KUBECONFIG={os.environ['KUBECONFIG']}"
    return str(Path.home() / ".kube" / "config")


def _kubeconfig_problem() -> str | None:
    """Why there are no credentials to load, if that is plain from the files alone."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    default = Path.home() / ".kube" / "config"
    if not paths and not default.exists():
        return f"not in a pod, KUBECONFIG is not set and {default} does not exist"
    missing = [p for p in paths if not Path(p).is_file()]
    if paths and len(missing) == len(paths):
        return f"kubeconfig {missing[0]} does not exist"
    return None


async def connect(pool_size: int) -> client.ApiClient:
    """`runtime.api_client`, with a missing or unusable kubeconfig as an AccessError."""
    problem = _kubeconfig_problem()
    if problem is not None:
        raise AccessError(f"no Kubernetes credentials: {problem}")
    try:
        return await api_client(pool_size)
    except Exception as exc:  # kubernetes-asyncio's ConfigException, YAML errors, bad base64
        raise AccessError(f"cannot use {credentials_source()}: {_one_line(exc)}") from None


async def check_access(config: Config, api: client.ApiClient) -> None:
    """Who the credentials are (401 if nobody), then whether they may do what loadwise does.
    Raises AccessError; an unreachable server is only logged (start-up retries it)."""
    transport = Transport(api, pool_size=4)
    server = transport.host
    try:
        status, body = await transport.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        if status == 401:
            raise AccessError(
                f"the API server at {server} rejected the credentials from "
                f"{credentials_source()} (401 Unauthorized): the token or client certificate "
                "is not valid there"
            )
        user = _decode(body).get("status", {}).get("userInfo", {}).get("username", "")
        user = user or "these credentials"
        needed = NEEDED + (LEASES if config.leader_elect else ())
        answers = await asyncio.gather(
            *(_allowed(transport, check, config.lease_namespace) for check in needed)
        )
    except (ssl.SSLError, aiohttp.ClientConnectorCertificateError) as exc:
        raise AccessError(
            f"cannot verify the API server at {server} with {credentials_source()}: "
            f"{_one_line(exc)}"
        ) from None
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        log.warning("API server at %s not reachable yet (%s): start-up retries", server, exc)
        return
    finally:
        await transport.close()
    denied = [
        _describe(check) for check, allowed in zip(needed, answers, strict=True) if not allowed
    ]
    if denied:
        shown = ", ".join(denied[:4]) + (f" and {len(denied) - 4} more" if len(denied) > 4 else "")
        raise AccessError(
            f"{user} may not {shown} (403 Forbidden from {server}): bind it to the ClusterRole "
            "the chart installs (charts/loadwise)"
        )


async def _allowed(transport: Transport, check: tuple[str, str, str, str], namespace: str) -> bool:
    verb, group, resource, subresource = check
    attributes: dict[str, str] = {"verb": verb, "group": group, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    if resource == "leases":
        attributes["namespace"] = namespace
    status, body = await transport.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    if status == 401:
        raise AccessError(f"the API server rejected the credentials from {credentials_source()}")
    if status >= 300:  # the review itself is not allowed: let start-up find out for real
        return True
    return bool(_decode(body).get("status", {}).get("allowed"))


def _describe(check: tuple[str, str, str, str]) -> str:
    verb, group, resource, subresource = check
    name = f"{resource}.{group}" if group else resource
    return f"{verb} {name}/{subresource}" if subresource else f"{verb} {name}"


def _decode(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:400]


async def preflight(config: Config) -> None:
    """connect + check_access, closing the client."""
    api = await connect(pool_size=4)
    try:
        await check_access(config, api)
    finally:
        await api.close()
