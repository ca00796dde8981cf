# toolhost — see README.md. `make demo` runs the example, `make test` runs every test.
GO ?= go
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: all build demo test bench proto tools-proto

all: build

build:
	$(GO) build ./...

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# proto regenerates the committed protocol code with pinned generators.
# Needs protoc (Debian: protobuf-compiler).
proto: tools-proto
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative internal/pluginpb/plugin.proto internal/echopb/echo.proto

tools-proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
