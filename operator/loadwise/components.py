"""The composition root: the parts the operator is built from, made from the settings (the API
client, the metrics sources and their caches with the workload lookup they learn through, the
scheduler, the informers that feed it, and who this replica is). `build` is used by `run`
(Runtime), `explain` and the tests, so a dry run reads what the operator reads."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from .config import Config
from .kube.informer import Informer, uid_of
from .kube.transport import Http, Transport
from .scheduler import device_classes
from .scheduler.binding.binder import Binder
from .scheduler.dynamic_resources import claims as resource_claims
from .scheduler.dynamic_resources.objects import SLICES_PATH
from .scheduler.pod_groups.members import PATHS as pod_group_paths
from .scheduler.queue import SchedulingQueue
from .scheduler.scheduler import Scheduler
from .scheduler.state import ClusterState
from .scheduler.volumes.storage_state import StorageState
from .scheduler.workload_selectors import WorkloadSelectors, namespaced_name
from .usage.cache import MetricsCache, MetricsSource
from .usage.learned import PodFacts, WorkloadOf
from .usage.scrape_intervals import DEFAULT_LAG
from .usage.source_kind import BuildContext


async def api_client(pool_size: int) -> client.ApiClient:
    """An ApiClient from the in-cluster service account, or from $KUBECONFIG / ~/.kube/config."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # kubernetes-asyncio reads $KUBECONFIG at import time; read it now instead.
        await kube_config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def metrics_sources(
    config: Config, transport: Http, state: ClusterState, ready: asyncio.Event | None = None
) -> dict[str, MetricsSource]:
    """The enabled sources (usage/sources.py), each built from its settings."""

    def allocatable(name: str) -> dict[str, int] | None:
        node = state.nodes.get(name)
        return dict(node.allocatable) if node is not None else None

    context = BuildContext(transport, state.nodes.keys, allocatable, config.metrics.lag, ready)
    return {source.source_name: source.build(context) for source in config.enabled_sources()}


def workload_lookup(state: ClusterState, max_age: float = 1.0) -> WorkloadOf:
    """(namespace, name) -> the facts of a pod on a node, for the caches' learning.
    The state keys pods by uid: an index by name is built from it when older than `max_age`
    seconds, so once per refresh (which asks about every pod at once), not once per pod."""
    index: dict[tuple[str, str], PodFacts] = {}
    built = -math.inf

    def workload_of(namespace: str, name: str) -> PodFacts | None:
        nonlocal index, built
        now = time.monotonic()
        if now - built > max_age:
            index = {
                (pod.namespace, pod.name): PodFacts(
                    pod.workload, pod.placed_at, *pod.requests.nonzero
                )
                for pod in state.pods.values()
            }
            built = now
        return index.get((namespace, name))

    return workload_of


def metrics_caches(
    config: Config, transport: Http, state: ClusterState, ready: asyncio.Event | None = None
) -> dict[str, MetricsCache]:
    """One cache per enabled source, learning per-workload usage unless turned off. `ready`:
    set when the state is listed (what answers need of it waits for that, not the requests)."""
    workload_of = workload_lookup(state) if config.metrics.learn_usage else None
    # A pod's usage is learned once a whole rate window lies after its start, which comes
    # after its binding (image pull, container start): two lags after placement.
    # (at least: the cache doubles the lag its source reports, when longer).
    learn_after = 2 * (DEFAULT_LAG if config.metrics.lag is None else config.metrics.lag)
    return {
        name: MetricsCache(
            source,
            config.metrics.interval,
            workload_of,
            learn_after,
            ready,
            backfill=config.metrics.backfill,
        )
        for name, source in metrics_sources(config, transport, state, ready).items()
    }


def workload_informers(transport: Http, workloads: WorkloadSelectors) -> list[Informer]:
    """Services, ReplicationControllers, ReplicaSets and StatefulSets, for kube-scheduler's
    system default spreading: only their selectors are kept."""
    informers = [
        Informer(
            transport,
            "/api/v1/services",
            workloads.on_service_event,
            namespaced_name,
            workloads.relisted_services,
        )
    ]
    for path in (
        "/api/v1/replicationcontrollers",
        "/apis/apps/v1/replicasets",
        "/apis/apps/v1/statefulsets",
    ):
        resource = path.rsplit("/", 1)[1]
        informers.append(
            Informer(
                transport,
                path,
                functools.partial(workloads.on_controller_event, resource),
                namespaced_name,
                functools.partial(workloads.relisted_controllers, resource),
            )
        )
    return informers


def new_scheduler(
    config: Config, transport: Http, ready: asyncio.Event | None = None, *, dry_run: bool = False
) -> Scheduler:
    """The scheduler with its state, queue, binder and metrics caches, from the settings. A
    dry run (explain) never binds: its binder writes nothing and names no replica."""
    queue = SchedulingQueue(
        config.scheduling.initial_backoff,
        config.scheduling.max_backoff,
        config.scheduling.unschedulable_timeout,
    )
    state = ClusterState(storage_changed=queue.move_all_to_active)
    identity = "" if dry_run else identity_of(config)
    return Scheduler(
        config.scheduler_name,
        Binder(transport, config.scheduler_name, identity),
        metrics_caches(config, transport, state, ready),
        queue,
        config.scheduling,
        state=state,
    )


@dataclass(frozen=True)
class OptionalInformer:
    """An informer of an API a cluster may not serve, or a role may not grant: without it,
    loadwise runs on as `absent` says, after telling `on_absent`."""

    informer: Informer
    absent: str  # what is lost, for the log
    on_absent: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Informers:
    """The informers feeding a scheduler. The required ones are listed before its first
    decision; the optional ones (DeviceClasses, both PodGroup APIs) are dropped if not served."""

    namespaces: Informer
    nodes: Informer
    pods: Informer
    workloads: tuple[Informer, ...]  # Services and controllers: system default spreading
    budgets: Informer | None  # PodDisruptionBudgets, for preemption only
    optional: tuple[OptionalInformer, ...]
    storage: tuple[Informer, ...] = ()  # claims, volumes, classes, CSI objects: volume plugins

    @property
    def required(self) -> tuple[Informer, ...]:
        budgets = (self.budgets,) if self.budgets is not None else ()
        return (
            self.namespaces,
            self.nodes,
            self.pods,
            *self.workloads,
            *budgets,
            *self.storage,
        )


def storage_informers(transport: Http, storage: StorageState) -> tuple[Informer, ...]:
    """What the volume plugins read, as kube-scheduler's informers for them."""
    return (
        Informer(
            transport,
            "/api/v1/persistentvolumeclaims",
            storage.on_claim_event,
            namespaced_name,
            storage.relisted_claims,
        ),
        Informer(
            transport,
            "/api/v1/persistentvolumes",
            storage.on_volume_event,
            on_relisted=storage.relisted_volumes,
        ),
        Informer(
            transport,
            "/apis/storage.k8s.io/v1/storageclasses",
            storage.on_class_event,
            on_relisted=storage.relisted_classes,
        ),
        Informer(
            transport,
            "/apis/storage.k8s.io/v1/csinodes",
            storage.on_csi_node_event,
            on_relisted=storage.relisted_csi_nodes,
        ),
        Informer(
            transport,
            "/apis/storage.k8s.io/v1/csidrivers",
            storage.on_driver_event,
            on_relisted=storage.relisted_drivers,
        ),
        Informer(
            transport,
            "/apis/storage.k8s.io/v1/volumeattachments",
            storage.on_attachment_event,
            on_relisted=storage.relisted_attachments,
        ),
        Informer(
            transport,
            "/apis/storage.k8s.io/v1/csistoragecapacities",
            storage.on_capacity_event,
            namespaced_name,
            storage.relisted_capacities,
        ),
    )


def optional_informers(transport: Http, scheduler: Scheduler) -> tuple[OptionalInformer, ...]:
    classes = scheduler.device_classes
    claims = scheduler.state.claims
    pod_groups = scheduler.pod_groups
    return (
        OptionalInformer(
            Informer(
                transport, device_classes.PATH, classes.on_event, on_relisted=classes.relisted
            ),
            "pods requesting DRA-backed extended resources are not recognised as such",
        ),
        OptionalInformer(
            Informer(
                transport,
                SLICES_PATH,
                scheduler.devices.on_slice_event,
                on_relisted=scheduler.devices.relisted_slices,
            ),
            "no devices are known: pods with resource claims to allocate find none",
        ),
        OptionalInformer(
            Informer(
                transport, resource_claims.PATH, claims.on_event, namespaced_name, claims.relisted
            ),
            "pods naming ResourceClaims are not held until their claims exist",
            claims.unserved,
        ),
        *(
            OptionalInformer(
                Informer(
                    transport,
                    path,
                    pod_groups.on_event(api),
                    namespaced_name,
                    pod_groups.relisted(api),
                ),
                f"pods naming a PodGroup of {api} are placed one by one, as any other pod",
                functools.partial(pod_groups.unwatch, api),
            )
            for api, path in pod_group_paths.items()
        ),
    )


def informers(transport: Http, scheduler: Scheduler, config: Config) -> Informers:
    preemption = scheduler.preemption
    return Informers(
        Informer(
            transport,
            "/api/v1/namespaces",
            scheduler.on_namespace_event,
            on_relisted=scheduler.relisted_namespaces,
        ),
        Informer(
            transport,
            "/api/v1/nodes",
            scheduler.on_node_event,
            on_relisted=scheduler.relisted_nodes,
        ),
        Informer(
            transport, "/api/v1/pods", scheduler.on_pod_event, uid_of, scheduler.relisted_pods
        ),
        tuple(workload_informers(transport, scheduler.state.workloads)),
        Informer(
            transport,
            "/apis/policy/v1/poddisruptionbudgets",
            preemption.on_budget_event,
            namespaced_name,
            preemption.relisted_budgets,
        )
        if config.scheduling.preemption
        else None,
        optional_informers(transport, scheduler),
        storage_informers(transport, scheduler.state.storage),
    )


@dataclass(frozen=True)
class Built:
    api: client.ApiClient
    transport: Transport
    scheduler: Scheduler
    informers: Informers


def build(
    config: Config,
    api: client.ApiClient,
    ready: asyncio.Event | None = None,
    *,
    dry_run: bool = False,
    pool_size: int | None = None,
) -> Built:
    """Everything a replica (or a dry run) is made of, wired; nothing started or listed."""
    transport = Transport(api, pool_size=pool_size or config.scheduling.bind_concurrency + 8)
    scheduler = new_scheduler(config, transport, ready, dry_run=dry_run)
    return Built(api, transport, scheduler, informers(transport, scheduler, config))


def identity_of(config: Config) -> str:
    return (
        config.replica.identity
        or config.replica.pod_name
        or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    )


def operator_object(config: Config) -> dict[str, str] | None:
    """What operator-level events and the Degraded condition go on: our Pod, else our Lease."""
    if config.replica.pod_name and config.replica.pod_namespace:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": config.replica.pod_name,
            "namespace": config.replica.pod_namespace,
        }
    if config.election.leader_elect:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": config.election.lease_name,
            "namespace": config.election.lease_namespace,
        }
    return None


async def report_startup_failure(config: Config, message: str) -> None:
    """A Warning event (StartupFailed) on our Pod, or Lease, while start-up keeps failing:
    nothing else runs then (no /metrics, no probes), so the log and this event are all there
    is. Best effort: the API server may be what is failing."""
    target = operator_object(config)
    if target is None or config.scheduling.shadow:  # a shadow trial writes nothing
        return
    with contextlib.suppress(Exception):
        api = await api_client(pool_size=1)
        transport = Transport(api, pool_size=2)
        try:
            async with asyncio.timeout(5):
                binder = Binder(transport, config.scheduler_name)
                await binder.object_event(target, "Warning", "StartupFailed", message)
        finally:
            await transport.close()
            await api.close()
