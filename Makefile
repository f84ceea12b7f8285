# SPDX-License-Identifier: Apache-2.0
#
# pivirt dataplane. `make` lists the targets. `make demo` and `make test`
# install what they need (Debian packages, pinned Go tools) on their own.

SHELL        := /bin/bash
GO           ?= go
BIN          := $(CURDIR)/bin
TOOLS        := $(BIN)/tools
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -X main.version=$(VERSION) -X pivirt.hu/pivirt/control/cli.Version=$(VERSION)
TEST_TIMEOUT ?= 60m

# Pinned code generators (the generated code is committed; a build needs none).
BUF_VERSION          := v1.75.0
PROTOC_GEN_GO        := v1.36.12
PROTOC_GEN_CONNECT   := v1.21.1
GOLANGCI_LINT        := v2.15.0
NFPM                 := v2.48.0
CLANG                ?= clang
# The programs' own C (bpf/vendor/ is third-party), formatted by bpf/.clang-format.
BPF_SOURCES          := $(wildcard bpf/*.c bpf/lib/*.h)

# Debian packages: what builds and tests need, and what the demo needs.
TEST_DEBS := clang llvm bpftool iproute2 iputils-ping util-linux curl isc-dhcp-client udhcpc busybox dhcpcd-base tcpdump \
             kea-admin kea-dhcp4-server dnsmasq-base nftables iptables ebtables iperf3 bc etcd-server gcc qemu-system-x86 \
             prometheus systemd
DEMO_DEBS := iproute2 isc-dhcp-client bpftool iputils-ping util-linux
# The VM demo boots QEMU; tools/vm/mkguest.sh fetches the guest's kernel and
# busybox with apt-get download and installs nothing.
DEMO_VM_DEBS := iproute2 util-linux qemu-system-x86

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install the Debian packages tests need (idempotent; apt only when something is missing)
	@./tools/install-debs.sh $(TEST_DEBS)

.PHONY: demo-deps
demo-deps:
	@./tools/install-debs.sh $(DEMO_DEBS)

.PHONY: demo-vm-deps
demo-vm-deps:
	@./tools/install-debs.sh $(DEMO_VM_DEBS)

.PHONY: go-version
go-version: ## fail unless go is at least go.mod's version (the module and the pinned tools need it)
	@GO=$(GO) ./tools/require-go.sh

.PHONY: tools
tools: go-version $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-connect-go ## install the pinned code generators into bin/tools (Go as go.mod says)

$(TOOLS)/buf: | go-version
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
$(TOOLS)/protoc-gen-connect-go:
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT)

.PHONY: build
build: go-version ## build bin/pivirtd and bin/pivirtctl
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/pivirtd ./cmd/pivirtd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/pivirtctl ./cmd/pivirtctl

.PHONY: package
package: go-version $(TOOLS)/nfpm ## build bin/pivirt_<version>_amd64.deb (version from git tags v0.N.0: tools/package/version.sh)
	GO=$(GO) NFPM=$(TOOLS)/nfpm ./tools/package/build.sh $(BIN)

$(TOOLS)/nfpm: | go-version
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM)

.PHONY: generate
generate: tools ## regenerate the bpf2go bindings/objects (clang) and the API code (buf)
	@./tools/install-debs.sh clang llvm
	BPF2GO_CC=$(CLANG) $(GO) generate ./...
	cd api && PATH=$(TOOLS):$$PATH buf generate

.PHONY: check-generated
check-generated: generate ## fail when committed generated code is stale
	@git diff --exit-code --stat -- '*.go' '*.o' || { echo "generated code is stale: run make generate and commit"; exit 1; }

.PHONY: test
test: deps go-version ## run every tier: unit, kernel (BPF_PROG_TEST_RUN) and end to end (root); PIVIRT_E2E=1 makes missing privileges fail
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: check-seeds
check-seeds: ## compare the seeds' examples with test/seeds/testdata (PIVIRT_SEEDS, default ../shared/seeds; UPDATE=1 writes them again)
	PIVIRT_SEEDS=$${PIVIRT_SEEDS:-$(abspath ../shared/seeds)} $(GO) test -count=1 -run 'TestFixturesMatchSeeds$$' -v ./test/seeds $(if $(UPDATE),-update)

.PHONY: soak
soak: deps ## the randomized ordering test for long: PIVIRT_ORDER_STEPS (default 10000) steps, PIVIRT_ORDER_SEED to replay, PIVIRT_ORDER_SYNC_DELAYS (default 0,3ms) the journal flush slowed down
	PIVIRT_E2E=1 PIVIRT_ORDER_STEPS=$${PIVIRT_ORDER_STEPS:-10000} $(GO) test -count=1 -timeout 6h -run 'TestPrivilegedOrderings$$' -v ./test/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|ordering test:|steps in|FAILED|invariants|step [0-9]+ \(seed'

.PHONY: soak-cluster
soak-cluster: deps ## the ordering test across two nodes on etcd for long: PIVIRT_CLUSTER_ORDER_STEPS (default 2000) steps, PIVIRT_CLUSTER_ORDER_SEED to replay
	PIVIRT_E2E=1 PIVIRT_CLUSTER_ORDER_STEPS=$${PIVIRT_CLUSTER_ORDER_STEPS:-2000} $(GO) test -count=1 -timeout 6h -run 'TestPrivilegedClusterOrderings$$' -v ./test/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok)|cluster ordering test:|steps in|FAILED|invariants|step [0-9]+ \(seed'

.PHONY: test-unit
test-unit: ## unit tier only (no privileges)
	$(GO) test -race -count=1 -short ./...

.PHONY: bench
bench: deps build ## run the benchmarks and print figures for BENCHMARKS.md
	./tools/bench/run.sh

.PHONY: lint
lint: tools $(TOOLS)/golangci-lint ## clang-format on bpf/ (bpf/.clang-format), golangci-lint (.golangci.yml: vet, errcheck, staticcheck, unused, gofmt) and buf lint
	@./tools/install-debs.sh clang-format
	clang-format --dry-run -Werror $(BPF_SOURCES)
	$(TOOLS)/golangci-lint run ./...
	cd api && $(TOOLS)/buf lint

$(TOOLS)/golangci-lint: | go-version
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT)

.PHONY: format
format: ## gofmt the Go sources, clang-format the BPF C
	gofmt -w $$(git ls-files '*.go' | grep -v '_bpfe[lb].go$$')
	@./tools/install-debs.sh clang-format
	clang-format -i $(BPF_SOURCES)

.PHONY: demo
demo: demo-deps build ## netns topology + pivirtd + manifests + a real DHCP client through the guard + inspect
	./tools/demo.sh

.PHONY: guest
guest: ## make bin/guest: the small VM (Debian cloud kernel, busybox initramfs) that demo-vm, the VM test and bench boot
	./tools/vm/mkguest.sh

.PHONY: demo-vm
demo-vm: demo-vm-deps build guest ## a booted QEMU VM guarded by vmRef: its lease, counters, a ping, a spoof dropped, the ACL through an ExternalIP
	$(GO) run ./tools/demovm -bin $(BIN)

.PHONY: clean
clean: ## remove build output
	rm -rf $(BIN)
