# The two commands that matter: `make demo` and `make test`. Both install what they need first
# (hack/ensure-tools: Debian packages, pinned Kubernetes binaries, helm, a Python venv), with
# caches in ~/.cache/loadwise (override with LOADWISE_CACHE), never in the repo.
SHELL := /bin/bash
ENV = eval "$$(hack/ensure-tools --print-env)"

.PHONY: tools demo cluster test lint unit quick lock crd

tools:
	hack/ensure-tools

# The demo installs only what it runs (hack/ensure-tools --for demo): a first run on a new
# machine prints its table without waiting for the other tools.
demo:
	@eval "$$(hack/ensure-tools --for demo --print-env)" && loadwise-dev demo

# A local cluster to use with kubectl, in the foreground: Ctrl-C stops everything. From another
# shell: `loadwise-dev status|load|down` (`loadwise-dev up -d` starts it in the background).
# REAL_NODES=N adds N real nodes (kubelet + containerd running real containers; see docs/development.md).
REAL_NODES ?= 0
cluster:
	@$(ENV) && loadwise-dev up --real-nodes $(REAL_NODES)

# The device allocator's own Go tests (hack/dra-allocator: the memo checked against the plain
# allocator, first fit by score, in-flight devices) run first: a few seconds.
test:
	@$(ENV) && ruff check operator dev tests bench && ruff format --check operator dev tests bench && mypy \
	  && lint-imports && (cd hack/dra-allocator && go vet . && go test -count=1 .) \
	  && python -m pytest -p no:cacheprovider -ra

unit:
	@$(ENV) && python -m pytest -p no:cacheprovider tests/unit

# Everything but the slow fault tests (CI runs those too, in `make test`).
quick:
	@$(ENV) && python -m pytest -p no:cacheprovider -ra -m "not faults"

lint:
	@$(ENV) && ruff check operator dev tests bench && ruff format --check operator dev tests bench && mypy \
	  && lint-imports

# requirements.lock: the image's dependencies pinned with hashes (pip-tools in a venv of its own).
lock:
	@python3 -m venv $${TMPDIR:-/tmp}/loadwise-piptools && $${TMPDIR:-/tmp}/loadwise-piptools/bin/pip install -q pip-tools \
	  && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' > $${TMPDIR:-/tmp}/loadwise-image.in \
	  && $${TMPDIR:-/tmp}/loadwise-piptools/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras --no-header \
	     --output-file $${TMPDIR:-/tmp}/loadwise-image.lock $${TMPDIR:-/tmp}/loadwise-image.in \
	  && { sed -n '1,4p' requirements.lock; grep -v '^--find-links' $${TMPDIR:-/tmp}/loadwise-image.lock; } > requirements.lock.new && mv requirements.lock.new requirements.lock

crd:
	@$(ENV) && python -m loadwise.policies.crd --write

# The operator's image, built on this machine without a Docker engine (podman; the Debian base is
# cached outside the repo): prints the build time and sizes; the OCI archive is in build/image/.
.PHONY: image
image:
	@$(ENV) && hack/build-image
