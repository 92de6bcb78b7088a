"""The topology kube-scheduler gives a bound in-tree PV whose plugin the node has migrated to
CSI (VolumeBinding's tryTranslatePVToCSI with csi-translation-lib's TranslateInTreePVToCSI, read
in the pinned v1.37.2 and v0.37.2 modules): the zone moves to the CSI driver's key, so such a
node must carry that key to take the volume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ...selectors import NodeSelectorTerm, Requirement
from ...storage import MIGRATED, Volume

# The CSINode annotation listing the in-tree plugins migrated to CSI on its node.
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
# The zone keys of the translations that touch topology; the Azure Disk and Portworx ones do not.
CSI_ZONE_KEYS = {
    "kubernetes.io/gce-pd": "topology.gke.io/zone",
    "kubernetes.io/aws-ebs": "topology.ebs.csi.aws.com/zone",
    "kubernetes.io/cinder": "topology.cinder.csi.openstack.org/zone",
}
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
_PLUGIN_OF = {driver: plugin for plugin, driver in MIGRATED.items()}


class TranslationError(Exception):
    """TranslateInTreePVToCSI refused the PV: kube-scheduler fails the cycle with this error."""


def migrated_plugins(annotations: Mapping[str, str]) -> frozenset[str]:
    """A CSINode's migrated plugins (isPluginMigratedToCSIOnNode reads them so)."""
    value = annotations.get(MIGRATED_PLUGINS) or ""
    return frozenset(value.split(",")) if value else frozenset()


def as_seen_on(volume: Volume, migrated: frozenset[str]) -> Volume:
    """The PV whose node affinity checkBoundClaims tests on a node with these migrated plugins:
    translated when its in-tree plugin is one of them, else unchanged."""
    if volume.in_tree is None:
        return volume
    plugin = _PLUGIN_OF[volume.in_tree[0]]
    if plugin not in migrated:
        return volume
    _check_zones(plugin, volume)
    key = CSI_ZONE_KEYS.get(plugin)
    if key is None:
        return volume
    return replace(volume, node_affinity=_translated_topology(volume, key))


def _check_zones(plugin: str, volume: Volume) -> None:
    """GCE PD's translation refuses a regional disk whose zones do not name one region
    (gceGetRegionFromZones). The other refusals (a malformed `aws://` volume ID, an Azure disk
    kind other than Managed) are not repeated here: such a PV is judged by its topology."""
    if plugin != "kubernetes.io/gce-pd":
        return
    zones = (volume.labels.get(BETA_ZONE) or volume.labels.get(ZONE) or "").split("__")
    if len(zones) < 2:
        return
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(
                "could not translate pv: failed to get region from zones: zone in unexpected "
                f"format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}"
            )
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:
        got = " ".join(f"{r}:{{}}" for r in sorted(regions))  # Go prints a set so
        raise TranslationError(
            "could not translate pv: failed to get region from zones: multiple or no regions "
            f"gotten from zones, got: map[{got}]"
        )


def _translated_topology(volume: Volume, csi_key: str) -> tuple[NodeSelectorTerm, ...] | None:
    """translateTopologyFromInTreeToCSI: the zone key (GA, else beta; from the affinity, else the
    labels) becomes `csi_key`, or the zones a label lists are added to every term; a beta region
    key becomes the GA one."""
    terms = volume.node_affinity
    zone, region = _topology_labels(volume)
    if _values(terms, zone):
        terms = _renamed(terms, zone, csi_key)
    elif zone in volume.labels:
        zones = tuple(sorted({z.strip() for z in volume.labels[zone].split("__") if z.strip()}))
        if zones:
            added = Requirement(csi_key, "In", zones)
            if not terms:
                terms = (NodeSelectorTerm((added,), ()),)
            else:
                terms = tuple(replace(t, expressions=(*t.expressions, added)) for t in terms)
    if region == BETA_REGION and _values(terms, BETA_REGION):
        terms = _renamed(terms, BETA_REGION, REGION)
    return terms


def _topology_labels(volume: Volume) -> tuple[str, str]:
    """getTopologyLabel: GA or beta, by the affinity first, then the labels; GA by default."""
    for zone, region in ((ZONE, REGION), (BETA_ZONE, BETA_REGION)):
        if _has_key(volume.node_affinity, zone):
            return zone, region
    for zone, region in ((ZONE, REGION), (BETA_ZONE, BETA_REGION)):
        if zone in volume.labels:
            return zone, region
    return ZONE, REGION


def _has_key(terms: tuple[NodeSelectorTerm, ...] | None, key: str) -> bool:
    return any(r.key == key for t in terms or () for r in t.expressions)


def _values(terms: tuple[NodeSelectorTerm, ...] | None, key: str) -> bool:
    return any(r.values for t in terms or () for r in t.expressions if r.key == key)


def _renamed(
    terms: tuple[NodeSelectorTerm, ...] | None, old: str, new: str
) -> tuple[NodeSelectorTerm, ...] | None:
    if not terms:
        return terms
    out = []
    for term in terms:
        renamed = tuple(replace(r, key=new) if r.key == old else r for r in term.expressions)
        out.append(replace(term, expressions=renamed))
    return tuple(out)
