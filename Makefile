# Two promises: `make run` serves the API with the embedded defaults and `make test` runs
# every check. Both install what is missing first (Debian packages only when absent,
# `npm ci` only when package-lock.json changed).
SHELL := /bin/bash
.DEFAULT_GOAL := run
NODE := node --import tsx
DEPS_STAMP := node_modules/.package-lock.json
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends

.PHONY: run test deps test-deps typecheck lint format openapi bench admin

$(DEPS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(DEPS_STAMP)

deps: $(DEPS_STAMP)

# PostgreSQL for the store suite (tests start their own throwaway cluster with initdb).
test-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "installing postgresql (tests start their own throwaway cluster)"; \
	  apt-get update -qq && $(APT_INSTALL) postgresql; \
	fi

run: deps
	$(NODE) src/main.ts

test: deps test-deps
	npx tsc --noEmit
	npx biome ci .
	$(NODE) test/run.ts

typecheck: deps
	npx tsc --noEmit

lint: deps
	npx biome check .

format: deps
	npx biome check --write .

# Regenerates the committed OpenAPI document (a test fails when it is stale).
openapi: deps
	$(NODE) scripts/write-openapi.ts

bench: deps
	$(NODE) bench/run.ts
