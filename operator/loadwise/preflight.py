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

from .components import api_client
from .config import Config
from .kube.permission import Permission
from .kube.transport import Transport
from .logs import one_line

log = logging.getLogger(__name__)


# Every permission loadwise uses but the metrics sources' own (each source declares those), in
# the order a refusal names them: the preflight check asks one SelfSubjectAccessReview for each
# that applies, and tests/unit/test_chart_values.py checks the chart's ClusterRole and Lease
# Role grant each one (and nothing else, but for the few reads it lists there).
PERMISSIONS: tuple[Permission, ...] = (
    *(
        Permission(verb, group, resource)
        for resource, group in (
            ("nodes", ""),  # the state (informers)
            ("pods", ""),
            ("namespaces", ""),  # labels for affinity's namespaceSelector
            ("services", ""),  # selectors for default topology spreading
            ("replicationcontrollers", ""),
            ("replicasets", "apps"),
            ("statefulsets", "apps"),
            ("deviceclasses", "resource.k8s.io"),  # devices (scheduler/dynamic_resources/)
            ("resourceclaims", "resource.k8s.io"),
            ("resourceslices", "resource.k8s.io"),
            ("podgroups", "scheduling.k8s.io"),  # scheduler/pod_groups/, both APIs
            ("podgroups", "scheduling.x-k8s.io"),
            ("persistentvolumeclaims", ""),  # the volume plugins (scheduler/volumes/)
            ("persistentvolumes", ""),
            ("storageclasses", "storage.k8s.io"),
            ("csinodes", "storage.k8s.io"),
            ("csidrivers", "storage.k8s.io"),
            ("csistoragecapacities", "storage.k8s.io"),
            ("volumeattachments", "storage.k8s.io"),
            ("schedulingpolicies", "loadwise.io"),  # policywatch
        )
        for verb in ("list", "watch")
    ),
    *(  # preemption spares what they protect
        Permission(verb, "policy", "poddisruptionbudgets", when="preemption")
        for verb in ("list", "watch")
    ),
    Permission("create", "", "pods", "binding"),  # binder
    Permission("patch", "", "persistentvolumes"),  # VolumeBinding's PreBind: claimRef
    Permission("patch", "", "persistentvolumeclaims"),  # ... and the selected-node annotation
    Permission("update", "resource.k8s.io", "resourceclaims"),  # DynamicResources' PreBind
    Permission("create", "resource.k8s.io", "resourceclaims"),  # ... extended resources' claim
    Permission("delete", "resource.k8s.io", "resourceclaims"),  # ... and Unreserve, PostFilter
    Permission("update", "resource.k8s.io", "resourceclaims", "status"),
    Permission("patch", "resource.k8s.io", "resourceclaims", "status"),  # ... and Unreserve
    Permission("patch", "", "pods", "status"),  # PodScheduled, nominations, victims; Degraded
    Permission("patch", "scheduling.k8s.io", "podgroups", "status"),  # pod_groups/status.py
    Permission("patch", "scheduling.x-k8s.io", "podgroups", "status"),
    Permission("delete", "", "pods", when="preemption"),  # preemption's victims
    Permission("create", "", "events", ""),
    Permission("patch", "loadwise.io", "schedulingpolicies"),  # pre-0.1.0 finalizers
    Permission("patch", "loadwise.io", "schedulingpolicies", "status"),  # reporting
    *(
        Permission(verb, "coordination.k8s.io", "leases", when="leader_elect")  # leader.py
        for verb in ("get", "list", "watch", "create", "update")  # list/watch: standby's watch
    ),
    Permission("get", "", "nodes", when="soft_taints"),  # soft_taints.py
    Permission("update", "", "nodes", when="soft_taints"),
    Permission("create", "", "pods", "eviction", when="evictions"),  # rebalancing's Evict mode
    *(  # its ledger (scheduler/rebalancing/move_store.py), beside the Lease
        Permission(verb, "", "configmaps", when="evictions") for verb in ("get", "create", "update")
    ),
)


def needed(config: Config) -> list[Permission]:
    """The permissions `config` makes loadwise use: the table's that apply, and those of the
    metrics sources it enables."""
    applies = {
        "always": True,
        "leader_elect": config.election.leader_elect,
        "preemption": config.scheduling.preemption,
        "evictions": config.scheduling.rebalance_evictions,
        "soft_taints": config.scheduling.soft_taints,
    }
    sources = [p for source in config.enabled_sources() for p in source.permissions]
    used = [p for p in PERMISSIONS if applies[p.when]] + sources
    if config.scheduling.shadow:  # a shadow trial reads, and writes nothing (no Lease)
        return [p for p in used if p.verb in ("get", "list", "watch") and p.when != "leader_elect"]
    return used


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
    """`components.api_client`, with a missing or unusable kubeconfig as an AccessError."""
    problem = _kubeconfig_problem()
    if problem is not None:
        raise AccessError(f"no Kubernetes credentials: {problem}")
    try:
        return await api_client(pool_size)
    except Exception as exc:  # kubernetes-asyncio's ConfigException, YAML errors, bad base64
        raise AccessError(f"cannot use {credentials_source()}: {one_line(exc)}") from None


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
        checks = needed(config)
        answers = await asyncio.gather(*(_allowed(transport, check, config) for check in checks))
    except (ssl.SSLError, aiohttp.ClientConnectorCertificateError) as exc:
        raise AccessError(
            f"cannot verify the API server at {server} with {credentials_source()}: {one_line(exc)}"
        ) from None
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        log.warning("API server at %s not reachable yet (%s): start-up retries", server, exc)
        return
    finally:
        await transport.close()
    denied = [
        check.describe() for check, allowed in zip(checks, answers, strict=True) if not allowed
    ]
    if denied:
        shown = ", ".join(denied[:4]) + (f" and {len(denied) - 4} more" if len(denied) > 4 else "")
        raise AccessError(
            f"{user} may not {shown} (403 Forbidden from {server}): bind it to the ClusterRole "
            "the chart installs (charts/loadwise)"
        )


async def _allowed(transport: Transport, check: Permission, config: Config) -> bool:
    attributes: dict[str, str] = {
        "verb": check.verb,
        "group": check.group,
        "resource": check.resource,
    }
    if check.subresource:
        attributes["subresource"] = check.subresource
    if check.when == "leader_elect" or check.resource == "configmaps":  # Roles: that namespace
        attributes["namespace"] = config.election.lease_namespace
    if check.resource == "configmaps":  # the chart's Role names the ledger
        attributes["name"] = f"{config.election.lease_name}-rebalance"
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


def _decode(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def preflight(config: Config) -> None:
    """connect + check_access, closing the client."""
    api = await connect(pool_size=4)
    try:
        await check_access(config, api)
    finally:
        await api.close()
