"""Container images for the real nodes, made without a registry or a Docker engine.

Each is an OCI image archive (an image layout in a tar) with one layer holding Debian's static
busybox, written here byte for byte (so it is the same on every machine) and imported into a
node's containerd with `ctr images import`; pods use `imagePullPolicy: Never`.

- `localhost/loadwise/pause:dev`: the pod sandbox (containerd's `sandbox_image`): sleeps.
- `localhost/loadwise/burn:dev`: a workload for tests, the demo and users trying loadwise:
  burns `BURN_MILLICPU` millicores (whole cores with `yes`, the remainder by pausing one `yes`
  for the rest of every 100 ms) and holds `BURN_MEMORY` bytes in a file under `BURN_HOLD_DIR`
  (default /dev/shm: tmpfs, charged to the container's memory).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (hack/ensure-tools installs it)
APPLETS = ("sh", "sleep", "yes", "head", "cat", "kill", "usleep", "echo", "env", "true", "wait")
PAUSE = "localhost/loadwise/pause:dev"
BURN = "localhost/loadwise/burn:dev"

BURN_SCRIPT = r"""#!/bin/sh
# Burn BURN_MILLICPU millicores and hold BURN_MEMORY bytes until stopped.
m=${BURN_MILLICPU:-0}
mem=${BURN_MEMORY:-0}
pids=""
trap 'kill $pids 2>/dev/null; exit 0' TERM INT
if [ "$mem" -gt 0 ]; then
  head -c "$mem" /dev/zero > "${BURN_HOLD_DIR:-/dev/shm}/hold"
fi
i=0
while [ "$i" -lt $((m / 1000)) ]; do
  yes > /dev/null & pids="$pids $!"
  i=$((i + 1))
done
rest=$((m % 1000))
if [ "$rest" -gt 0 ]; then
  yes > /dev/null & duty=$!
  pids="$pids $duty"
  while :; do
    usleep $((rest * 100))
    kill -STOP "$duty"
    usleep $(((1000 - rest) * 100))
    kill -CONT "$duty"
  done &
  pids="$pids $!"
fi
while :; do sleep 3600 & wait $!; done
"""


@dataclass(frozen=True)
class Image:
    name: str
    entrypoint: tuple[str, ...]
    files: tuple[tuple[str, bytes, int], ...] = ()  # (path, content, mode) besides busybox


IMAGES = (
    Image(PAUSE, ("/bin/sleep", "2147483647")),
    Image(BURN, ("/bin/sh", "/burn"), (("burn", BURN_SCRIPT.encode(), 0o755),)),
)


def _layer(image: Image) -> bytes:
    """A reproducible tar: fixed owners and times, sorted entries."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes | None, mode: int, link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, mode
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        for directory in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            add(directory, None, 0o1777 if directory == "tmp" else 0o755)
        add("bin/busybox", BUSYBOX.read_bytes(), 0o755)
        for applet in APPLETS:
            add(f"bin/{applet}", None, 0o777, link="busybox")
        for path, content, mode in image.files:
            add(path, content, mode)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(image: Image, path: Path) -> Path:
    """The image as an OCI archive at `path` (what `podman save --format oci-archive` writes)."""
    layer = _layer(image)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(image.entrypoint),
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        layer_desc = _blob(tar, layer)
        config_desc = _blob(tar, _json(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_desc},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
        }
        manifest_desc = _blob(tar, _json(manifest))
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **manifest_desc,
                    "annotations": {
                        "io.containerd.image.name": image.name,
                        "org.opencontainers.image.ref.name": image.name,
                    },
                }
            ],
        }
        for name, data in (
            ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
            ("index.json", _json(index)),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return path


def archives(directory: Path) -> list[Path]:
    """Every image's archive, written into `directory` (about 2 MB each, in milliseconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_archive(image, directory / (image.name.rsplit("/", 1)[1].replace(":", "-") + ".tar"))
        for image in IMAGES
    ]
