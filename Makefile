# sandgate build and test entry points. `make test` is the one command CI
# runs (.ci/run); it must work on a fresh clone with only Go installed.

GO         ?= go

# -trimpath: what go builds does not depend on where the clone is, so a
# clean clone at a new path (CI clones afresh every run) compiles nothing
# an earlier clone compiled, and no binary carries this machine's paths.
ifeq ($(filter -trimpath,$(GOFLAGS)),)
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
endif
POLICY_DIR := policy/rego
SCHEMA_DIR := policy/schemas
OPA        := $(GO) tool opa
COVERAGE   := 90

.PHONY: test deps npm-deps test-go test-go-postgres policy-check lint bench bench-gateway build images dockerd-start dockerd-stop gvisor k8s-start k8s-stop

# The runtime root filesystem `make images` exports (scripts/images.sh):
# the subprocess executor's root in the tests, as in a gateway configured
# with executors.subprocess.root_dir.
SANDGATE_ROOTFS_DIR ?= /var/lib/sandgate/rootfs
export SANDGATE_ROOTFS_DIR

## test: the full suite: system dependencies, runsc (built before the
## engine starts, so that the engine registers it), a Docker engine (started
## only if none answers), the runtime images and the exported runtime root,
## policy checks, then every Go test with -race,
## SANDGATE_REQUIRE_{DOCKER,GVISOR,BROWSER,ROOT,NPM_CLIENTS,RUNTIME_ROOT,POSTGRES}=1
## (tests needing Docker, gVisor, Chromium, root, the npm clients, the
## runtime root or PostgreSQL fail rather than skip), SANDGATE_RUNTIME_ROOT
## naming the export and SANDGATE_TEST_POSTGRES_DSN a private PostgreSQL
## cluster (scripts/postgres.sh: Debian's postgresql, installed if missing,
## initdb in a temporary directory, a Unix socket there and no TCP port),
## stopped and removed afterwards; its password is random per run and only
## ever passed in the environment. The approval hub's tests on PostgreSQL
## run beside the Go tests, and so does the short fault soak
## (soak-faults-ci, issue 21; its faults hit a private engine of its own):
## a failed check (a leak, a missing audit record, an internal or
## unexplained error, an engine recovery over 5 s) fails the run; its
## report is .build/soak/reliability.md. The engine this run started is
## stopped afterwards whatever the tests did, and the first failure's
## exit status is kept. The recipe shell's pid is the engine
## lease's holder (scripts/dockerd.sh). The single-node Kubernetes cluster
## (k8s-start) runs for the same holder; SANDGATE_REQUIRE_KUBERNETES=1
## makes the executors/k8s tests fail rather than skip without it.
test: deps
	@holder=$$$$; rc=0; pgdir=$$(mktemp -d -u /tmp/sandgate-pg.XXXXXX); \
	$(MAKE) --no-print-directory gvisor && \
	$(MAKE) --no-print-directory dockerd-start DOCKERD_HOLDER=$$holder && \
	$(MAKE) --no-print-directory images && \
	$(MAKE) --no-print-directory k8s-start K8S_HOLDER=$$holder && \
	$(MAKE) --no-print-directory policy-check && \
	pgdsn=$$(./scripts/postgres.sh start $$pgdir) && \
	SANDGATE_TEST_POSTGRES_DSN="$$pgdsn" SANDGATE_REQUIRE_POSTGRES=1 \
	SANDGATE_REQUIRE_DOCKER=1 SANDGATE_REQUIRE_GVISOR=1 SANDGATE_REQUIRE_BROWSER=1 SANDGATE_REQUIRE_ROOT=1 SANDGATE_REQUIRE_NPM_CLIENTS=1 \
	SANDGATE_REQUIRE_RUNTIME_ROOT=1 SANDGATE_RUNTIME_ROOT=$(SANDGATE_ROOTFS_DIR)/runtime SANDGATE_REQUIRE_KUBERNETES=1 \
		$(MAKE) --no-print-directory -j3 -Oline test-go test-go-postgres soak-faults-ci || rc=$$?; \
	./scripts/postgres.sh stop $$pgdir || true; \
	$(MAKE) --no-print-directory k8s-stop K8S_HOLDER=$$holder || true; \
	$(MAKE) --no-print-directory dockerd-stop DOCKERD_HOLDER=$$holder || true; \
	exit $$rc

## k8s-start / k8s-stop: the single-node Kubernetes cluster the
## executors/k8s tests run on (scripts/k8s.sh: loopback only, an isolated
## pod bridge; stop restores the host). Its binaries are built once per
## machine from the Go module proxy (scripts/k8s-build.sh, cached under
## /var/lib/sandgate/k8s: 12-50 min cold on 2 cores, nothing after).
k8s-start:
	./scripts/k8s.sh start $(K8S_HOLDER)

k8s-stop:
	./scripts/k8s.sh stop $(K8S_HOLDER)

## dockerd-start / dockerd-stop: start dockerd when no engine answers, and
## stop it again only if scripts/dockerd.sh started it and no other holder
## still needs it.
dockerd-start:
	./scripts/dockerd.sh start $(DOCKERD_HOLDER)

dockerd-stop:
	./scripts/dockerd.sh stop $(DOCKERD_HOLDER)

## gvisor: build gVisor's runsc from the Go module proxy (pinned version,
## CGO_ENABLED=0, `go install pkg@version`: a tool, not in our go.mod) and
## link it at /usr/local/bin/runsc; cached by version, so a second run
## builds nothing. scripts/dockerd.sh registers it with the engine.
gvisor:
	./scripts/gvisor.sh

## images: build the runtime image(s) from images/*/ (debootstrap minbase +
## docker import; aio on top of runtime); skipped when the recipe's hash tag
## exists. Also exports the runtime root to $(SANDGATE_ROOTFS_DIR)/runtime
## (a symlink to runtime-<hash>) when it is missing.
images:
	./scripts/images.sh

## deps: install the system tools the tests need (Debian apt), if missing,
## then the npm clients.
deps:
	./scripts/ensure-deps.sh
	@$(MAKE) --no-print-directory npm-deps

## npm-deps: the npm packages the end-to-end tests drive as real peers
## (e2e/*/), and the dev dependencies of the TypeScript client package
## (clients/typescript: deepagents and the TypeScript compiler its tests
## use), exactly as their committed lockfiles pin them: `npm ci` from
## the npm registry, no install scripts. A directory whose node_modules was
## installed from the same package.json and lockfile is left alone.
NPM_CLIENTS := e2e/deepagents e2e/mcp e2e/e2b e2e/daytona clients/typescript

npm-deps:
	@for d in $(NPM_CLIENTS); do \
		sum=$$(cat $$d/package.json $$d/package-lock.json | sha256sum | cut -d' ' -f1); \
		stamp=$$d/node_modules/.sandgate-installed; \
		[ "$$(cat $$stamp 2>/dev/null)" = "$$sum" ] && continue; \
		echo "npm ci in $$d"; \
		(cd $$d && npm ci --ignore-scripts --no-audit --no-fund) && echo $$sum > $$stamp || exit 1; \
	done

## test-go: every package's tests with -race. TEST_P packages run at once
## (go test's -p, default GOMAXPROCS): each package spends much of its
## time waiting on containers, interpreters and loopback peers, so on a
## 2-core machine several packages in flight keep both cores busy where
## two would not. Five, because five packages take 3 to 5 minutes each
## under this load (subprocess, docker, gvisor, aio, api): with four
## slots the fifth started only when a slot freed and ran alone at the
## end (CI 24: 415 s with 4, CI 25: 364 s with 5; the cores are busy
## throughout with 5). The packages that take longest start first
## (TEST_FIRST, then the rest of ./... once each): go test starts
## packages in the order it is given them, and a long package started
## last is the whole run's tail (81 s of 498 on 2 cores).
TEST_P ?= 5
TEST_FIRST ?= ./executors/subprocess ./executors/docker ./executors/gvisor ./executors/aio ./api ./e2e ./browser
test-go:
	$(GO) test -race -count=1 -p $(TEST_P) -timeout 30m $(TEST_FIRST) ./...

## test-go-postgres: the approval hub's tests again, on PostgreSQL (the
## audit store suite runs on both drivers within test-go already).
test-go-postgres:
	SANDGATE_TEST_STORAGE_DRIVER=postgres $(GO) test -race -count=1 -timeout 10m ./confirm/

## policy-check: opa fmt, opa check --strict against the input schema, and
## the Rego unit tests with a coverage floor, all through the pinned go tool.
policy-check:
	@out=$$($(OPA) fmt --list $(POLICY_DIR)); if [ -n "$$out" ]; then echo "opa fmt would change: $$out"; exit 1; fi
	$(OPA) check --strict -s $(SCHEMA_DIR) $(POLICY_DIR)
	@mkdir -p .build
	$(OPA) test --coverage --threshold $(COVERAGE) $(POLICY_DIR) > .build/rego-coverage.json || \
		{ rc=$$?; grep -o '"coverage": [0-9.]*' .build/rego-coverage.json | tail -1; $(OPA) test $(POLICY_DIR); exit $$rc; }
	@echo "rego coverage: $$(grep -o '"coverage": [0-9.]*' .build/rego-coverage.json | tail -1 | cut -d' ' -f2)% (floor $(COVERAGE)%)"

## lint: gofmt, go vet and staticcheck (pinned as a go tool).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

## bench: every Go benchmark, with allocation counts.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

## bench-gateway: issue 3's figures: run_code of print(1) through a real
## gateway process against python3 spawned directly, at c=1 and c=8, 5,000
## requests per level (10,000 in all), then the gateway's RSS and goroutines.
bench-gateway:
	$(GO) run ./bench -only subprocess -c 1,8 -n 5000

build:
	$(GO) build -o bin/ ./cmd/...

.PHONY: bench-report soak soak-faults soak-faults-ci

BENCH_FLAGS   ?=
SOAK_DURATION ?= 10m
SOAK_FLAGS    ?=

## bench-report: every scenario of issue 9 against its baseline (bench/),
## then docs/performance.md, docs/perf/*.svg, docs/perf/results.json and
## the README's perf block. Starts an engine if none answers (the recipe
## shell's pid holds the lease), builds the images, installs the peers
## (bench/tools.sh: bubblewrap, socat, ripgrep, srt), and stops only the
## engine it started. Sample counts: BENCH_FLAGS (go run ./bench -h).
bench-report:
	@holder=$$$$; rc=0; \
	./scripts/gvisor.sh && \
	./scripts/dockerd.sh start $$holder && \
	$(MAKE) --no-print-directory images && \
	./bench/tools.sh && \
	$(GO) run ./bench -out docs -readme README.md $(BENCH_FLAGS) || rc=$$?; \
	./scripts/dockerd.sh stop $$holder || true; \
	exit $$rc

## soak: the mixed workload for SOAK_DURATION (default 10m), sampling the
## gateway's RSS, goroutines, fds, containers and child processes; writes
## docs/perf/soak.json and soak.svg and re-renders the report.
soak:
	@holder=$$$$; rc=0; \
	./scripts/dockerd.sh start $$holder && \
	$(MAKE) --no-print-directory images && \
	$(GO) run ./bench -soak $(SOAK_DURATION) -out docs -readme README.md $(SOAK_FLAGS) || rc=$$?; \
	./scripts/dockerd.sh stop $$holder || true; \
	exit $$rc

## soak-faults: issue 21's fault soak (root): the mixed workload over every
## executor the machine has, with the faults (engine restart, docker kill,
## aio container removed, sandboxd killed, workspace disk full, gateway
## SIGKILL, broken policy, audit disk full) injected in turn until
## SOAK_FAULTS_DURATION (default 15m) has passed and each ran 3 times;
## writes docs/reliability.md and docs/perf/reliability.json. The faults hit
## a private engine of the soak's own (scripts/dockerd.sh on /run/sgsoak,
## data root /var/lib/sgsoak-docker, images copied from the shared engine)
## and small tmpfs data directories: the shared engine is never restarted.
SOAK_FAULTS_DURATION ?= 15m
SOAK_FAULTS_FLAGS    ?=

soak-faults:
	@holder=$$$$; rc=0; \
	./scripts/gvisor.sh && \
	./scripts/dockerd.sh start $$holder && \
	$(MAKE) --no-print-directory images && \
	$(GO) run ./bench -faults $(SOAK_FAULTS_DURATION) -out docs $(SOAK_FAULTS_FLAGS) || rc=$$?; \
	./scripts/dockerd.sh stop $$holder || true; \
	exit $$rc

## soak-faults-ci: the short variant `make test` runs beside the Go tests:
## about 2 minutes, every fault once, the report under .build/soak/ (the
## committed docs/reliability.md is the full run's). Its workload has 2
## sessions, not 6: each is a closed loop that takes all the CPU it can
## get, and 3 sessions answered as many requests as 6 on this machine's 2
## cores (1580 and 1702 in 2 minutes), so beside the Go tests more would
## only take CPU from them. Needs what `make test` has set up: root, the
## shared engine with the images (the base images copied into the private
## one on first use, sandgate/aio layered there from this checkout), runsc.
soak-faults-ci:
	$(GO) run ./bench -faults 2m -faults-rounds 1 -faults-gap 3s -faults-warmup 10s -faults-workers 2 -faults-ci -out .build/soak
