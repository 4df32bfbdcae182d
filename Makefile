# sandgate build and test entry points. `make test` is the one command CI
# runs (.ci/run); it must work on a fresh clone with only Go installed.

GO         ?= go
POLICY_DIR := policy/rego
SCHEMA_DIR := policy/schemas
OPA        := $(GO) tool opa
COVERAGE   := 90

.PHONY: test deps test-go policy-check lint bench bench-gateway build

## test: the full suite: system dependencies, policy checks, then every Go
## test with -race.
test: deps policy-check test-go

## deps: install the system tools the tests need (Debian apt), if missing.
deps:
	./scripts/ensure-deps.sh

test-go:
	$(GO) test -race -count=1 -timeout 30m ./...

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

## bench-gateway: a real gateway process against raw baselines (bench/).
bench-gateway:
	$(GO) run ./bench -c 1,8 -n 1000 -rss-requests 10000

build:
	$(GO) build -o bin/ ./cmd/...
