# toolhost — see README.md. `make demo` runs the example, `make test` runs every test.
GO ?= go
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GOBIN := $(shell $(GO) env GOPATH)/bin

WORKSPACE := examples/workspace

# The pinned MCP servers the end-to-end tests run (from npm).
MCP_NODE := mcp/testdata/node

.PHONY: all build demo test test-deps bench proto tools-proto

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
	$(GO) test -race -count=1 ./...

test-deps: $(MCP_NODE)/node_modules/.package-lock.json

$(MCP_NODE)/node_modules/.package-lock.json: $(MCP_NODE)/package-lock.json
	npm ci --prefix $(MCP_NODE) --no-audit --no-fund

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# proto regenerates the committed protocol code with pinned generators.
# Needs protoc (Debian: protobuf-compiler).
proto: tools-proto
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative internal/pluginpb/plugin.proto internal/echopb/echo.proto internal/servepb/serve.proto

tools-proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
