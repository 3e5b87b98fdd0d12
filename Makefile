# braid — see README.md. `make run` runs the demo; `make test` runs every test,
# starting a real Kafka broker (deploy/local/kafka.sh) for the integration tests.

GO        ?= go
KAFKA     := deploy/local/kafka.sh
BROKERS   := 127.0.0.1:$(or $(BRAID_KAFKA_PORT),39092)
PKGS      := ./...

.PHONY: all build run test test-unit bench bench-e2e lint proto kafka-start kafka-stop clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/braid ./cmd/braid

## run: the demo — in-process Kafka on 127.0.0.1:19092, simulator, job, live view.
run:
	$(GO) run ./cmd/braid demo

## test: unit tests and integration tests against a real Kafka 4.x broker.
test:
	@$(KAFKA) start
	@status=0; BRAID_KAFKA_BROKERS=$(BROKERS) $(GO) test -race -count=1 -timeout 20m $(PKGS) || status=$$?; \
	  $(KAFKA) stop; exit $$status

## test-unit: tests that need no broker (integration tests skip outside CI).
test-unit:
	$(GO) test -race -count=1 $(PKGS)

## bench: Go micro-benchmarks, then the end-to-end benchmark on the real broker.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./connectors/... ./operators/...
	@$(MAKE) --no-print-directory bench-e2e

bench-e2e:
	@$(KAFKA) start
	@status=0; BRAID_KAFKA_BROKERS=$(BROKERS) $(GO) run ./benchmarks/e2e || status=$$?; \
	  $(KAFKA) stop; exit $$status

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## proto: regenerate operators/braidpb/braid.pb.go with Debian's protoc and protoc-gen-go.
proto:
	@command -v protoc >/dev/null && command -v protoc-gen-go >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq protobuf-compiler golang-goprotobuf-dev)
	protoc -I operators/braidpb --go_out=. --go_opt=module=github.com/braidlabs/braid \
	  operators/braidpb/braid/v1/braid.proto

kafka-start:
	@$(KAFKA) start

kafka-stop:
	@$(KAFKA) stop

clean:
	rm -rf bin braid-state
