# The two commands that matter: `make demo` and `make test`. Both install what they need first
# (hack/ensure-tools: Debian packages, pinned Kubernetes binaries, helm, a Python venv), with
# caches in ~/.cache/loadwise (override with LOADWISE_CACHE), never in the repo.
SHELL := /bin/bash
ENV = eval "$$(hack/ensure-tools --print-env)"

.PHONY: tools demo test lint unit crd

tools:
	hack/ensure-tools

demo:
	@$(ENV) && loadwise demo

test:
	@$(ENV) && ruff check operator dev tests bench && ruff format --check operator dev tests bench && mypy \
	  && lint-imports && python -m pytest -p no:cacheprovider -ra

unit:
	@$(ENV) && python -m pytest -p no:cacheprovider tests/unit

lint:
	@$(ENV) && ruff check operator dev tests bench && ruff format --check operator dev tests bench && mypy \
	  && lint-imports

crd:
	@$(ENV) && python -m loadwise.crd --write
