# braid — see README.md. `make run` runs the demo; `make test` runs every test,
# starting a real Kafka broker (deploy/local/kafka.sh) for the integration
# tests; those that need a real Alertmanager, Prometheus or OpenTelemetry
# Collector start their own (deploy/local/alertmanager.sh,
# deploy/local/prometheus.sh, deploy/local/otelcol.sh).

GO        ?= go
KAFKA     := bash deploy/local/kafka.sh
PKGS      ?= ./...
GO_TEST_FLAGS ?= -race -count=1 -p 4 -parallel 4 -timeout 40m

.PHONY: all build run test test-unit fuzz bench bench-e2e bench-scale bench-restart bench-pause bench-latency bench-view lint proto otelcol kafka-start kafka-stop clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/braid ./cmd/braid

## run: the demo — in-process Kafka on 127.0.0.1:19092, simulator, job, live view.
## Built without cgo, as make build: only gpu-exporter needs it (NVML), and
## cgo would compile go-nvml's C on the first run, with its warnings.
run:
	@echo "building braid (CGO_ENABLED=0) into bin/braid, then running braid demo..."
	@CGO_ENABLED=0 $(GO) build -o bin/braid ./cmd/braid
	bin/braid demo

## test: unit tests and integration tests against a real Kafka 4.x broker
## (and the real Alertmanager and Prometheus the tests start).
## The four passes run at once (deploy/local/parallel.sh, output lines
## prefixed [race], [norace], [demo], [procs]): they spend most of their time
## waiting on paced input, the broker, a Collector or a browser.
test:
	@trap '$(KAFKA) stop' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  $(KAFKA) start >/dev/null && eval "$$($(KAFKA) env)" && \
	  bash deploy/local/parallel.sh \
	    race "$(GO) test $(GO_TEST_FLAGS) $(RACE_PKGS) && $(GO) test -race -count=1 -run '^TestKfakeSmoke\$$' ./cmd/braid/job" \
	    norace "$(GO) test -count=1 -parallel 6 -timeout 30m $(NORACE_PKGS)" \
	    demo "$(GO) test -count=1 -timeout 30m -run '^(TestSamplingToCollector|TestViewInBrowser|TestReportFromDemo)\$$' ./cmd/braid" \
	    procs "$(GO) test -count=1 -timeout 30m -run '^(TestSigtermUnderLoad|TestLateLogsAfterPurge|TestRestartEmitsOpenTraces)\$$' ./cmd/braid"
# NORACE_PKGS run without -race. The simulator's, the KV-diagnosis
# accuracy suite's and the alerting benchmark's tests are single-goroutine
# generation and scoring, which the detector only slows (15-25 times:
# 826 s of the simulator's tests against 47 s). The job's integration
# tests run whole jobs for minutes against paced input beside a real
# Alertmanager, Prometheus and Collector: slowed by the detector the input
# falls late and the run takes 20 minutes. The job's goroutines are
# race-checked by TestKfakeSmoke (the whole job on kfake, under -race),
# the engine's by its own tests on the real broker. The sampling test runs
# two jobs beside the real Collector over a paced fleet, likewise; the
# view's browser test drives headless Chromium through a running demo, and
# the report test renders every incident of a demo with all KV faults.
# TestSigtermUnderLoad, TestLateLogsAfterPurge and TestRestartEmitsOpenTraces
# stop and restart a braid built without the detector over paced input
# (the SIGTERM test 24 times over 90 s): a pass of their own, off the race
# pass's longest path; the crash and scale tests run a braid built with
# the detector and stay in the race pass.
NORACE_PKGS := ./cmd/braid/job ./connectors/simulator ./benchmarks/kvaccuracy ./benchmarks/alerts
MODULE      := github.com/braidlabs/braid
RACE_PKGS    = $(filter-out $(patsubst ./%,$(MODULE)/%,$(NORACE_PKGS)),$(shell $(GO) list $(PKGS)))

## test-unit: tests that need no broker (integration tests skip outside CI).
test-unit:
	env -u BRAID_KAFKA_BROKERS -u BRAID_KAFKA_SASL_BROKERS -u BRAID_KAFKA_SASL_SSL_BROKERS -u BRAID_KAFKA_CA_FILE -u BRAID_ALERTMANAGER_URL CI= $(GO) test $(GO_TEST_FLAGS) $(PKGS)

## fuzz: every fuzz target in turn, FUZZTIME each (default 10m); crashers
## are saved under the package's testdata/fuzz as regression seeds.
FUZZTIME ?= 10m
# Minimizing each new interesting input of the pipeline targets for the
# default 60s would leave little time to fuzz.
FUZZMINIMIZE ?= 300x
FUZZ_TARGETS ?= ./connectors/otlp:FuzzDecode ./operators/semconv:FuzzWire ./operators/fuse:FuzzPipeline ./operators/fuse:FuzzKVEvent ./operators/fuse:FuzzFuseStage ./operators/kvgraph:FuzzKVGraph ./operators/sampling:FuzzEncode
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
	done

## bench: Go micro-benchmarks, then the end-to-end benchmark on the real broker.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./connectors/... ./operators/...
	@$(MAKE) --no-print-directory bench-e2e

bench-e2e:
	@trap '$(KAFKA) stop' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  $(KAFKA) start >/dev/null && eval "$$($(KAFKA) env)" && \
	  $(GO) run ./benchmarks/e2e $(BENCH_FLAGS)

## bench-scale: 2 braid processes against 1, each on one core (GOMAXPROCS=1).
bench-scale:
	@trap '$(KAFKA) stop' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  $(KAFKA) start >/dev/null && eval "$$($(KAFKA) env)" && \
	  $(GO) run ./benchmarks/scale $(BENCH_FLAGS)

## bench-pause: checkpoint pause percentiles under steady input (BENCH_FLAGS="-interval 1s").
bench-pause:
	@trap '$(KAFKA) stop' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  $(KAFKA) start >/dev/null && eval "$$($(KAFKA) env)" && \
	  $(GO) run ./benchmarks/pause $(BENCH_FLAGS)

## bench-latency: fused-record and incident latency of a live stream (BENCH_FLAGS="-rates 1,50 -duration 1m").
bench-latency:
	@trap '$(KAFKA) stop' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  $(KAFKA) start >/dev/null && eval "$$($(KAFKA) env)" && \
	  $(GO) run ./benchmarks/latency $(BENCH_FLAGS)

## bench-restart: restart time from 1 GiB of local state.
bench-restart:
	$(GO) run ./benchmarks/restart $(BENCH_FLAGS)

## bench-view: the view with 100,000 traces indexed: memory and disk per
## trace, API and rendered-page latency (headless Chromium).
bench-view:
	$(GO) run ./benchmarks/view $(BENCH_FLAGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## proto: regenerate operators/braidpb/*.pb.go (protoc from Debian's protobuf-compiler;
## protoc-gen-go built at the google.golang.org/protobuf version in go.mod).
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	protoc -I operators/braidpb --plugin=protoc-gen-go=$(CURDIR)/bin/protoc-gen-go \
	  --go_out=. --go_opt=module=github.com/braidlabs/braid \
	  operators/braidpb/braid/v1/*.proto

## otelcol: build the OpenTelemetry Collector of the tests (ocb, once; cached
## under $BRAID_CACHE_DIR) and print its path. connectors/otelcoltest runs it.
otelcol:
	@bash deploy/local/otelcol.sh build

kafka-start:
	@$(KAFKA) start

kafka-stop:
	@$(KAFKA) stop

clean:
	rm -rf bin braid-state
