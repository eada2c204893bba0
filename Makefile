# Two promises: `make run` serves the API with the embedded defaults and `make test` runs
# every check. Both install what is missing first (Debian packages only when absent,
# `npm ci` only when package-lock.json changed).
SHELL := /bin/bash
.DEFAULT_GOAL := run
NODE := node --import tsx
DEPS_STAMP := node_modules/.package-lock.json
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends

.PHONY: run build test deps console runtime-deps test-deps typecheck lint format openapi sdk-types sdk cli bench admin offline-image

# `npm ci` only: it installs exactly the lock and never rewrites it (a refused `npm ci` means
# package.json and the lock disagree; regenerate the lock with `npm install`, on purpose, and
# commit it). The lock records every platform's optional packages (biome's and blake-hash's);
# @napi-rs/blake-hash is pinned to 1.3.4, since 1.3.6 names platform packages never published.
$(DEPS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(DEPS_STAMP)

deps: $(DEPS_STAMP)

# What the local sandbox runtime shells out to (binary:package), installed only when absent.
RUNTIME_TOOLS := /usr/sbin/runc:runc /usr/bin/tini-static:tini /usr/sbin/nft:nftables /usr/sbin/ip:iproute2 \
  /usr/bin/setfattr:attr \
  /usr/sbin/mkfs.xfs:xfsprogs /usr/sbin/xfs_growfs:xfsprogs /usr/sbin/xfs_io:xfsprogs /usr/sbin/fsfreeze:util-linux \
  /usr/bin/gcc:gcc /usr/lib/$(shell uname -m)-linux-gnu/libc.a:libc6-dev /usr/bin/busybox:busybox-static
# Tests add a local registry and PostgreSQL (a throwaway cluster via initdb); busybox (the
# sandbox pool's launcher) also builds the test images; the stock OpenSSH client drives the
# SSH gateway's tests and benchmark.
TEST_TOOLS := /usr/bin/docker-registry:docker-registry /usr/bin/ssh:openssh-client
# The console's browser tests (test/console-browser.test.ts) drive Debian's Chromium headless.
TEST_TOOLS += /usr/bin/chromium:chromium
# The Python SDK's test (test/python-sdk.test.ts) builds its wheel offline, installs it in a
# venv and runs pytest and mypy there: Debian's packages only (nothing from PyPI).
PY_DIST := /usr/lib/python3/dist-packages
PYTHON_TEST_TOOLS := $(PY_DIST)/httpx:python3-httpx $(PY_DIST)/pytest:python3-pytest \
  $(PY_DIST)/build:python3-build $(PY_DIST)/wheel:python3-wheel $(PY_DIST)/setuptools:python3-setuptools \
  /usr/share/doc/python3-venv:python3-venv /usr/bin/mypy:mypy

define apt_install_missing
	@missing=""; for pair in $(1); do bin=$${pair%%:*}; pkg=$${pair##*:}; \
	  [ -e "$$bin" ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && $(APT_INSTALL) $$missing; fi
endef

runtime-deps:
	$(call apt_install_missing,$(RUNTIME_TOOLS))

test-deps: runtime-deps
	$(call apt_install_missing,$(TEST_TOOLS))
	$(call apt_install_missing,$(PYTHON_TEST_TOOLS))
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "installing postgresql (tests start their own throwaway cluster)"; \
	  apt-get update -qq && $(APT_INSTALL) postgresql; \
	fi

# The server runs as one bundled ES module (scripts/server-bundle.ts): without the TypeScript
# loader it is ready ~0.8 s sooner. Rebuilt on every run (0.3 s), so it is never stale.
build: deps console
	$(NODE) scripts/build-server.ts
	$(NODE) scripts/cli-bundle.ts

# The web console (console/, Preact with Vite), served by the server at /console: rebuilt
# only when its sources, the SDK's or the lock changed.
CONSOLE_SOURCES := $(shell find console/src packages/sdk/src -type f 2>/dev/null) console/index.html console/vite.config.ts
console/dist/index.html: $(DEPS_STAMP) $(CONSOLE_SOURCES)
	npx vite build --config console/vite.config.ts --logLevel warn
	@touch $@

console: console/dist/index.html

# The `warren` command (packages/cli): the CLI compiled to JavaScript (scripts/cli-bundle.ts,
# packages/cli/dist: plain node, no TypeScript loader) and a two-line wrapper in $(BIN_DIR)
# that runs this checkout's bin with node. `npx warren` works in the repo without it (the root
# package.json's "bin"; sources newer than the build run through tsx). Written only when absent
# or already this checkout's: another checkout's command is left alone (remove it to take it over).
BIN_DIR ?= /usr/local/bin
CLI_ENTRY := $(CURDIR)/packages/cli/bin/warren.mjs
cli: deps
	$(NODE) scripts/cli-bundle.ts
	@mkdir -p $(BIN_DIR)
	@if [ -e $(BIN_DIR)/warren ] && ! grep -qF '"$(CLI_ENTRY)"' $(BIN_DIR)/warren; then \
	  other=$$(sed -n 's/^exec node "\(.*\)" .*/\1/p' $(BIN_DIR)/warren); \
	  echo "$(BIN_DIR)/warren is another checkout's ($${other:-not a wrapper of this Makefile}): left alone."; \
	  echo "run this checkout's CLI with: node $(CLI_ENTRY) ... (or npx warren ... in $(CURDIR))"; \
	else \
	  printf '#!/bin/sh\nexec node "%s" "$$@"\n' "$(CLI_ENTRY)" > $(BIN_DIR)/warren.tmp; \
	  chmod 755 $(BIN_DIR)/warren.tmp && mv $(BIN_DIR)/warren.tmp $(BIN_DIR)/warren; \
	  echo "installed $(BIN_DIR)/warren -> $(CLI_ENTRY)"; \
	fi

# With no internet: a loopback registry (Debian's docker-registry, storage in ./data) holding
# an image built here from busybox-static (scripts/local-image.ts). `make run OFFLINE=1` runs
# it and makes its image the default one.
WARREN_LOCAL_REGISTRY ?= 127.0.0.1:5050
offline-image: deps
	$(call apt_install_missing,/usr/bin/docker-registry:docker-registry /usr/bin/busybox:busybox-static)
	WARREN_LOCAL_REGISTRY=$(WARREN_LOCAL_REGISTRY) $(NODE) scripts/local-image.ts

OFFLINE_ENV := $(if $(OFFLINE),WARREN_DEFAULT_IMAGE=$${WARREN_DEFAULT_IMAGE:-$(WARREN_LOCAL_REGISTRY)/warren/busybox:latest})

# UV_THREADPOOL_SIZE: see README.md (libuv reads it once, before the server's first line runs).
# The SSH gateway listens on 127.0.0.1:2222 unless WARREN_SSH_LISTEN says otherwise.
run: deps runtime-deps build cli $(if $(OFFLINE),offline-image)
	UV_THREADPOOL_SIZE=$${UV_THREADPOOL_SIZE:-16} WARREN_SESSION_LISTEN=$${WARREN_SESSION_LISTEN:-127.0.0.1:7081} \
	  WARREN_SSH_LISTEN=$${WARREN_SSH_LISTEN-127.0.0.1:2222} $(OFFLINE_ENV) node --enable-source-maps build/warren.mjs

test: deps test-deps console
	npx tsc --noEmit
	npx tsc --noEmit -p console
	npx biome ci .
	$(NODE) test/run.ts

typecheck: deps
	npx tsc --noEmit
	npx tsc --noEmit -p console

lint: deps
	npx biome check .

format: deps
	npx biome check --write .

# Regenerates the committed OpenAPI document and the SDK's wire types generated from it
# (a test fails when either is stale).
openapi: deps
	$(NODE) scripts/write-openapi.ts
	$(NODE) scripts/write-sdk-types.ts

sdk-types: deps
	$(NODE) scripts/write-sdk-types.ts

# @warren/sdk as a package: packages/sdk/dist (ESM JavaScript, .d.ts, source maps) and its
# tarball in build/ (`npm install ./build/warren-sdk-0.1.0.tgz` in a project). The repository's
# own code (the CLI, the tests) imports the SDK's sources, so nothing here needs the build.
sdk: deps
	@mkdir -p build
	cd packages/sdk && npm pack --pack-destination ../../build

bench: deps
	$(NODE) bench/run.ts
