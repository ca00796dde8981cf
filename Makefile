# toolhost — see README.md. `make demo` runs the example, `make test` runs every test.
GO ?= go
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTOC_GEN_GO_VTPROTO_VERSION := v0.6.1-0.20240319094008-0393e58bdf10
GOBIN := $(shell $(GO) env GOPATH)/bin

WORKSPACE := examples/workspace

# The pinned MCP servers the end-to-end tests run (from npm).
MCP_NODE := mcp/testdata/node
# The pinned TypeScript MCP client the mcpserve tests drive toolhost mcp with.
MCPSERVE_NODE := mcpserve/testdata/node
# The Node.js runner example's pinned gRPC packages.
NODE_RUNNER := examples/node-runner
# The pinned MCP conformance suite and the Node (>= 22) it runs on.
CONFORMANCE_NODE := mcpserve/testdata/conformance

.PHONY: all build demo test test-deps stress conformance bench bench-compare proto tools-proto

all: build

# build produces bin/toolhost (named so, not "host", which is the DNS utility).
build:
	$(GO) build -o bin/toolhost ./cmd/host

# demo runs the toolhost command on the bundled example workspace: its plugins are
# built from source on first activation, then listed and called.
demo: build
	bin/toolhost tools --location $(WORKSPACE)
	@echo
	bin/toolhost call --location $(WORKSPACE) upper '{"text": "hello from a plugin"}'
	@echo
	bin/toolhost call --location $(WORKSPACE) word_count '{"text": "Shall I compare thee\nto a summer day?"}'
	@echo
	bin/toolhost call --location $(WORKSPACE) countdown '{"seconds": 2}'
	@echo
	@echo '# a built-in tool, confined to the workspace and allowed by its rules:'
	bin/toolhost call --location $(WORKSPACE) read '{"path": "poem.txt", "limit": 3}'
	@echo
	@echo '# a trusted plugin reading the workspace through the Location services:'
	bin/toolhost call --location $(WORKSPACE) todo_scan
	@echo
	@echo '# a failure the model sees (exit status 1):'
	-bin/toolhost call --location $(WORKSPACE) find '{"text": "x", "pattern": "("}'

test: test-deps
	$(GO) vet ./...
	cd examples/author && $(GO) vet ./...  # a module of its own; examples/author_test.go tests it
	$(GO) test -race -count=1 ./...

# stress runs the serve stress test (many Locations activated, deactivated, settled,
# restarted and watched at once in one server, under -race) for STRESS_DURATION;
# make test runs it for a few rounds.
STRESS_DURATION ?= 5m
stress:
	$(GO) test -race -count=1 -run '^TestStress$$' -timeout 0 ./server/ -args -stress.duration=$(STRESS_DURATION)

test-deps: $(MCP_NODE)/node_modules/.package-lock.json $(MCPSERVE_NODE)/node_modules/.package-lock.json $(NODE_RUNNER)/node_modules/.package-lock.json $(CONFORMANCE_NODE)/node_modules/.package-lock.json

# conformance runs the official MCP conformance suite's server scenarios against
# toolhost mcp --http (mcpserve's TestConformance, which make test runs too), and
# its client scenarios against toolhost's MCP client (mcp's TestConformanceClient,
# expected failures in mcp/testdata/conformance-client/expected-failures.yml), and
# prints the suite's summary; it fails on a failure not listed in
# $(CONFORMANCE_NODE)/expected-failures.yml, and on a listed one that passes.
conformance: test-deps
	$(GO) test -count=1 -run '^TestConformance$$' -v ./mcpserve/
	$(GO) test -count=1 -run '^TestConformanceClient$$' -v ./mcp/

$(CONFORMANCE_NODE)/node_modules/.package-lock.json: $(CONFORMANCE_NODE)/package-lock.json
	npm ci --prefix $(CONFORMANCE_NODE) --no-audit --no-fund --engine-strict=false

$(MCP_NODE)/node_modules/.package-lock.json: $(MCP_NODE)/package-lock.json
	npm ci --prefix $(MCP_NODE) --no-audit --no-fund

$(MCPSERVE_NODE)/node_modules/.package-lock.json: $(MCPSERVE_NODE)/package-lock.json
	npm ci --prefix $(MCPSERVE_NODE) --no-audit --no-fund

$(NODE_RUNNER)/node_modules/.package-lock.json: $(NODE_RUNNER)/package-lock.json
	npm ci --prefix $(NODE_RUNNER) --no-audit --no-fund

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-compare runs every benchmark that has a baseline, six times, into
# benchmarks/*.txt, and prints each beside its baseline with benchstat (the median
# and its confidence interval per measure). The *Alternating benchmarks measure
# both sides in one loop and report their ratios. BENCHMARKS.md records a run.
BENCHSTAT := $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
bench-compare: test-deps
	mkdir -p benchmarks
	$(GO) test -run '^$$' -bench 'BenchmarkCallAlternating' -benchtime=30x -count=6 ./plugins/ > benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench 'BenchmarkConcurrentAlternating' -benchtime=40x -count=6 ./plugins/ >> benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench 'BenchmarkLaunchAlternating' -benchtime=20x -count=6 ./plugins/ >> benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench '^(BenchmarkCall|BenchmarkConcurrentCalls)$$' -benchmem -benchtime=3000x -count=6 ./plugins/ > benchmarks/calls.txt
	$(GO) test -run '^$$' -bench '^(BenchmarkLaunch|BenchmarkHostMemoryPerPlugin)$$' -benchtime=20x -count=6 ./plugins/ > benchmarks/launch.txt
	$(GO) test -run '^$$' -bench . -benchmem -count=6 ./registry/ > benchmarks/registry.txt
	$(GO) test -run '^$$' -bench Codec -benchmem -count=6 ./internal/pluginpb/ > benchmarks/codec.txt
	$(GO) test -run '^$$' -bench 'BenchmarkMCPCall$$' -benchmem -count=6 ./mcp/ > benchmarks/mcp.txt
	$(GO) test -run '^$$' -bench 'BenchmarkMCPCallAlternating' -count=6 ./mcp/ >> benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench 'BenchmarkCallAlternating' -benchtime=20x -count=6 ./mcpserve/ >> benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench 'BenchmarkSettleRoundTrip$$' -benchmem -count=6 ./server/ > benchmarks/serve.txt
	$(GO) test -run '^$$' -bench 'BenchmarkSettleRoundTripAlternating' -count=6 ./server/ >> benchmarks/alternating.txt
	$(GO) test -run '^$$' -bench Reload -benchtime=15x -count=2 ./devwatch/ > benchmarks/reload.txt
	taskset -c 0 $(GO) test -run '^$$' -bench 'BenchmarkCallAlternating|BenchmarkConcurrentAlternating' -benchtime=20x -count=6 ./plugins/ > benchmarks/alternating-1cpu.txt
	taskset -c 0 $(GO) test -run '^$$' -bench 'BenchmarkLaunchAlternating' -benchtime=20x -count=6 ./plugins/ > benchmarks/launch-alternating-1cpu.txt
	for f in calls launch mcp serve; do $(BENCHSTAT) -col /impl benchmarks/$$f.txt; done
	$(BENCHSTAT) -col /codec benchmarks/codec.txt
	for f in alternating alternating-1cpu launch-alternating-1cpu registry reload; do $(BENCHSTAT) benchmarks/$$f.txt; done

# proto regenerates the committed protocol code with pinned generators.
# Needs protoc (Debian: protobuf-compiler).
proto: tools-proto
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative internal/pluginpb/plugin.proto internal/echopb/echo.proto internal/servepb/serve.proto
	PATH="$(GOBIN):$$PATH" protoc --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
		internal/pluginpb/plugin.proto

tools-proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	$(GO) install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(PROTOC_GEN_GO_VTPROTO_VERSION)
