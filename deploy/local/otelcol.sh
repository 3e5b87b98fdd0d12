#!/usr/bin/env bash
# deploy/local/otelcol.sh — a real OpenTelemetry Collector for tests: Kafka in, files out.
#
#   deploy/local/otelcol.sh build    build the Collector (once, cached); prints the binary's path
#   deploy/local/otelcol.sh path     print the cached binary's path (exit 3 if it is not built)
#   deploy/local/otelcol.sh start    build if needed, start it, wait until it is ready; prints its dir
#   deploy/local/otelcol.sh stop     stop it (SIGTERM, then SIGKILL); its output files stay
#   deploy/local/otelcol.sh status   exit 0 and say so if it runs and is ready, else exit 3
#   deploy/local/otelcol.sh logs     print the tail of its log
#
# The Collector is a distribution of our own, otelcol-braid, made with the
# Collector builder (ocb) from deploy/local/otelcol-builder.yaml: the contrib
# Kafka receiver, the file exporter and the debug exporter for the tests; the
# groupbytrace processor and the Kafka exporter for the e2e benchmark's
# Collector contender (benchmarks/e2e -collector). ocb and the
# modules come from the Go module proxy on the first build (about four
# minutes on two cores with an empty Go build cache, ten seconds with a warm
# one); the binary is cached under
# $BRAID_CACHE_DIR/otelcol-<version>/<hash of the manifest>/, so later
# builds do nothing and a changed manifest builds anew.
#
# ocb's own `go mod tidy` fails for this manifest: the file exporter's tests
# import otlpencodingextension v0.165.1, which the proxy refuses. So ocb only
# writes the sources and go.mod (--skip-compilation; its failure is ignored
# when go.mod is there), and the build runs `go mod tidy -e`, which leaves
# out what only tests import, and `go build`.
#
# `start` writes a config: one Kafka receiver (otlp_proto, initial offset
# earliest, consumer group BRAID_OTELCOL_GROUP) reading the traces topic into
# a traces pipeline and the logs topic into a logs pipeline, each exported by
# a file exporter as OTLP JSON, one line per Kafka record (the receiver hands
# on each record alone), to $BRAID_OTELCOL_DIR/traces.json and logs.json,
# flushed every 100 ms. The Collector listens on no port unless
# BRAID_OTELCOL_METRICS_PORT asks for its own metrics. It is ready when its
# log says "Everything is ready" (the receiver has started its consumer;
# joining the group and fetching come after). A record that is not OTLP
# protobuf is logged ("failed to unmarshal message"), counted and skipped.
#
# Settings (environment):
#   BRAID_OTELCOL_DIR            its dir: config, pid file, log and output files; wiped
#                                on start, kept on stop (default /tmp/braid-otelcol)
#   BRAID_OTELCOL_BROKERS        comma-separated bootstrap brokers (default
#                                $BRAID_KAFKA_BROKERS, else 127.0.0.1:39092)
#   BRAID_OTELCOL_TRACES_TOPIC   topic of OTLP traces (default otlp_spans; empty: no traces pipeline)
#   BRAID_OTELCOL_LOGS_TOPIC     topic of OTLP logs (default otlp_logs; empty: no logs pipeline)
#   BRAID_OTELCOL_GROUP          consumer group (default braid-otelcol)
#   BRAID_OTELCOL_METRICS_PORT   port on 127.0.0.1 for the Collector's own Prometheus
#                                metrics (default 0: its metrics are off)
#   BRAID_OTELCOL_DEBUG          verbosity of a debug exporter in both pipelines, which
#                                logs what arrives: basic, normal or detailed (default: none)
#   BRAID_OTELCOL_BIN            a Collector binary to run instead of building one (it needs
#                                the kafka receiver and the file exporter, e.g. otelcol-contrib)
#   BRAID_CACHE_DIR              cache root (default ~/.cache/braid)
#   BRAID_OTELCOL_START_TIMEOUT  seconds to wait for "Everything is ready" (default 60)
#   BRAID_OTELCOL_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 15)
set -euo pipefail

VERSION=0.165.0                 # the distribution's version, as in the manifest
OCB_VERSION=v0.165.0            # go.opentelemetry.io/collector/cmd/builder
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MANIFEST=$SELF_DIR/otelcol-builder.yaml
CACHE=${BRAID_CACHE_DIR:-$HOME/.cache/braid}/otelcol-$VERSION
BUILD_LOG=           # set by key: the last build's log
BIN=                 # set by key or find_bin

DIR=${BRAID_OTELCOL_DIR:-/tmp/braid-otelcol}
BROKERS=${BRAID_OTELCOL_BROKERS:-${BRAID_KAFKA_BROKERS:-127.0.0.1:39092}}
TRACES_TOPIC=${BRAID_OTELCOL_TRACES_TOPIC-otlp_spans}
LOGS_TOPIC=${BRAID_OTELCOL_LOGS_TOPIC-otlp_logs}
GROUP=${BRAID_OTELCOL_GROUP:-braid-otelcol}
METRICS_PORT=${BRAID_OTELCOL_METRICS_PORT:-0}
DEBUG=${BRAID_OTELCOL_DEBUG:-}
START_TIMEOUT=${BRAID_OTELCOL_START_TIMEOUT:-60}
STOP_TIMEOUT=${BRAID_OTELCOL_STOP_TIMEOUT:-15}

PIDFILE=$DIR/otelcol.pid
CONFIG=$DIR/otelcol.yaml
LOGFILE=$DIR/otelcol.log
OWNER=$DIR/.braid-otelcol   # marks a dir this script made, so that only such a dir is ever wiped
READY_LINE='Everything is ready'

# elapsed FROM: seconds since $EPOCHREALTIME value FROM, 0.1 s precision.
elapsed() {
  local from=${1/[.,]/} to=${EPOCHREALTIME/[.,]/}
  local d=$(((to - from) / 100000))
  printf '%d.%d' $((d / 10)) $((d % 10))
}
log() { printf 'otelcol.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# key sets BIN and BUILD_LOG for the manifest: its hash, with the target
# platform, names the build.
key() {
  [[ -f "$MANIFEST" ]] || die "$MANIFEST is missing"
  local k
  k=$({ cat "$MANIFEST"; echo "ocb $OCB_VERSION"; go env GOOS GOARCH 2>/dev/null || uname -sm; } | sha256sum | cut -c1-16)
  BIN=$CACHE/$k/otelcol-braid
  BUILD_LOG=$CACHE/$k/build.log
}

# build makes the binary once; a lock serialises concurrent builds (two
# test packages, two checkouts). On failure it prints the log's tail.
build() {
  key
  [[ -x "$BIN" ]] && return 0
  command -v go >/dev/null 2>&1 || die "go not found (needed to build the Collector)"
  command -v flock >/dev/null 2>&1 || die "flock not found (Debian: apt-get install -y util-linux)"
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"
  flock 8
  if [[ -x "$BIN" ]]; then exec 8>&-; return 0; fi
  local t0=$EPOCHREALTIME out=${BIN%/*} src tools=$CACHE/tools/$OCB_VERSION
  src=$out/src
  rm -rf "$out" "$CACHE"/*/bin.tmp.*   # leftovers of an interrupted build; we hold the lock
  mkdir -p "$out"
  : >"$BUILD_LOG"
  log "building the OpenTelemetry Collector $VERSION (ocb $OCB_VERSION, $MANIFEST) into $out (once; minutes with an empty Go build cache) ..."
  # GOFLAGS= : the project's flags (say -mod=vendor) are not the distribution's.
  if [[ ! -x "$tools/builder" ]]; then
    rm -rf "$tools.tmp"
    if ! GOFLAGS= GOBIN="$tools.tmp" go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION" >>"$BUILD_LOG" 2>&1; then
      build_failed "go install go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION failed"
    fi
    rm -rf "$tools" && mkdir -p "${tools%/*}" && mv "$tools.tmp" "$tools"
  fi
  sed "s|^\([[:space:]]*output_path:\).*|\1 $src|" "$MANIFEST" >"$out/builder.yaml"
  grep -qF "output_path: $src" "$out/builder.yaml" || build_failed "$MANIFEST has no dist.output_path line to replace"
  if ! (cd "$out" && GOFLAGS= "$tools/builder" --config "$out/builder.yaml" --skip-compilation) >>"$BUILD_LOG" 2>&1; then
    [[ -f "$src/go.mod" ]] || build_failed "ocb wrote no $src/go.mod"
    echo "otelcol.sh: ocb's go mod tidy failed (expected: see the header of otelcol.sh); go mod tidy -e instead" >>"$BUILD_LOG"
  fi
  if ! (cd "$src" && GOFLAGS= go mod tidy -e && GOFLAGS= CGO_ENABLED=0 go build -trimpath -o "$out/bin.tmp.$$" .) >>"$BUILD_LOG" 2>&1; then
    build_failed "go build of the Collector failed"
  fi
  "$out/bin.tmp.$$" --version >>"$BUILD_LOG" 2>&1 || build_failed "the built Collector does not run"
  mv -f "$out/bin.tmp.$$" "$BIN"
  rm -rf "$src"
  # Builds of other manifests go after a week (not at once: another checkout may use one).
  find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "${out##*/}" ! -name tools -mtime +7 -exec rm -rf {} + 2>/dev/null || true
  log "built $BIN in $(elapsed "$t0")s"
  exec 8>&-
}

build_failed() {
  echo "----- last lines of $BUILD_LOG -----" >&2
  grep -v '^go: downloading ' "$BUILD_LOG" | tail -n 40 >&2 || true
  rm -f "${BIN%/*}"/bin.tmp.*
  die "$1 (full log: $BUILD_LOG)"
}

# find_bin sets BIN: BRAID_OTELCOL_BIN, or the cached build (made if missing).
find_bin() {
  if [[ -n "${BRAID_OTELCOL_BIN:-}" ]]; then
    [[ -x "$BRAID_OTELCOL_BIN" ]] || die "BRAID_OTELCOL_BIN=$BRAID_OTELCOL_BIN is not an executable"
    BIN=$BRAID_OTELCOL_BIN
  else
    build
  fi
}

check_settings() {
  local b list name
  IFS=, read -ra list <<<"$BROKERS"
  ((${#list[@]} > 0)) || die "BRAID_OTELCOL_BROKERS is empty"
  for b in "${list[@]}"; do
    b=${b// /}
    [[ "$b" =~ ^[A-Za-z0-9._-]+:[0-9]+$ ]] || die "BRAID_OTELCOL_BROKERS: $b is not host:port"
  done
  [[ -n "$TRACES_TOPIC$LOGS_TOPIC" ]] || die "BRAID_OTELCOL_TRACES_TOPIC and BRAID_OTELCOL_LOGS_TOPIC are both empty"
  for name in "$TRACES_TOPIC" "$LOGS_TOPIC" "$GROUP"; do
    [[ -z "$name" || "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "$name is not a Kafka topic or group name ([A-Za-z0-9._-]+)"
  done
  [[ "$METRICS_PORT" =~ ^[0-9]+$ ]] && ((METRICS_PORT < 65536)) || die "BRAID_OTELCOL_METRICS_PORT=$METRICS_PORT is not a port"
  case "$DEBUG" in
    "" | none | basic | normal | detailed) ;;
    *) die "BRAID_OTELCOL_DEBUG=$DEBUG: want basic, normal or detailed" ;;
  esac
  [[ "$DEBUG" != none ]] || DEBUG=
}

# pid_of prints the Collector's pid if the pid file names a live process
# that is our Collector (its command line names our config).
pid_of() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid=$(<"$PIDFILE")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  is_ours "$pid" || return 1
  echo "$pid"
}

# alive PID: whether PID is alive and not a zombie.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# is_ours PID: whether PID is alive and is our Collector. (Not for the pid
# of a process just started: until it has exec'd the binary its command
# line is this script's.)
is_ours() {
  alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "--config=file:$CONFIG "
}

is_ready() { [[ -f "$LOGFILE" ]] && grep -qF "$READY_LINE" "$LOGFILE"; }

log_tail() {
  if [[ -s "$LOGFILE" ]]; then
    echo "----- last lines of $LOGFILE -----" >&2
    tail -n "${1:-40}" "$LOGFILE" >&2
  fi
}

wipe_dir() {
  [[ -n "$DIR" && "$DIR" != "/" && "$DIR" != "$HOME" ]] || die "refusing to wipe BRAID_OTELCOL_DIR=$DIR"
  if [[ -e "$DIR" ]]; then
    if [[ -f "$OWNER" ]] || [[ -d "$DIR" && -z "$(ls -A "$DIR")" ]]; then
      rm -rf "$DIR"
    else
      die "$DIR exists and was not made by otelcol.sh; refusing to wipe it (set BRAID_OTELCOL_DIR)"
    fi
  fi
}

# write_config writes the config for the settings (into a temporary file
# first, so that no one reads half a file).
write_config() {
  local tmp="$CONFIG.tmp.$$" b list exporters
  IFS=, read -ra list <<<"$BROKERS"
  exporters=
  {
    cat <<EOF
# Generated by deploy/local/otelcol.sh: Kafka (OTLP protobuf) in, OTLP JSON lines out.
receivers:
  kafka:
    brokers:
EOF
    for b in "${list[@]}"; do echo "      - '${b// /}'"; done
    cat <<EOF
    client_id: braid-otelcol
    group_id: '$GROUP'
    initial_offset: earliest
EOF
    [[ -z "$TRACES_TOPIC" ]] || printf '    traces:\n      topics: [%s]\n      encoding: otlp_proto\n' "'$TRACES_TOPIC'"
    [[ -z "$LOGS_TOPIC" ]] || printf '    logs:\n      topics: [%s]\n      encoding: otlp_proto\n' "'$LOGS_TOPIC'"
    echo "exporters:"
    [[ -z "$TRACES_TOPIC" ]] || printf '  file/traces:\n    path: %s\n    format: json\n    flush_interval: 100ms\n' "'$DIR/traces.json'"
    [[ -z "$LOGS_TOPIC" ]] || printf '  file/logs:\n    path: %s\n    format: json\n    flush_interval: 100ms\n' "'$DIR/logs.json'"
    if [[ -n "$DEBUG" ]]; then
      printf '  debug:\n    verbosity: %s\n' "$DEBUG"
      exporters=", debug"
    fi
    echo "service:"
    echo "  telemetry:"
    echo "    logs:"
    echo "      level: info"
    echo "    metrics:"
    if ((METRICS_PORT > 0)); then
      cat <<EOF
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: $METRICS_PORT
EOF
    else
      echo "      level: none"
    fi
    echo "  pipelines:"
    [[ -z "$TRACES_TOPIC" ]] || printf '    traces:\n      receivers: [kafka]\n      exporters: [file/traces%s]\n' "$exporters"
    [[ -z "$LOGS_TOPIC" ]] || printf '    logs:\n      receivers: [kafka]\n      exporters: [file/logs%s]\n' "$exporters"
  } >"$tmp"
  mv -f "$tmp" "$CONFIG"
}

cmd_start() {
  local pid
  check_settings
  if pid=$(pid_of); then
    if is_ready; then
      log "already running (pid $pid, config $CONFIG; stop it to change its settings)"
      echo "$DIR"
      return 0
    fi
    log "pid $pid runs but is not ready; restarting it"
    cmd_stop >/dev/null
  fi
  find_bin
  local t0=$EPOCHREALTIME
  wipe_dir
  mkdir -p "$DIR"
  touch "$OWNER"
  write_config
  if ! "$BIN" validate --config="file:$CONFIG" >"$DIR/validate.log" 2>&1; then
    cat "$DIR/validate.log" >&2
    die "the Collector rejects the generated config $CONFIG"
  fi
  # In the background with no inherited stdin/stdout/stderr, so that it
  # outlives the caller and never holds the caller's output pipe open.
  nohup "$BIN" --config="file:$CONFIG" </dev/null >"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until is_ready; do
    if ! alive "$pid" || ((SECONDS >= deadline)); then
      log_tail 60
      if alive "$pid"; then
        log "the Collector did not become ready within ${START_TIMEOUT}s; stopping it"
      else
        log "the Collector exited before it was ready"
      fi
      # By its pid: pid_of does not know a process that has not exec'd yet.
      stop_pid "$pid" 2>/dev/null
      exit 1
    fi
    sleep 0.1
  done
  local what=
  [[ -z "$TRACES_TOPIC" ]] || what+="traces $TRACES_TOPIC -> $DIR/traces.json, "
  [[ -z "$LOGS_TOPIC" ]] || what+="logs $LOGS_TOPIC -> $DIR/logs.json, "
  log "Collector ready in $(elapsed "$t0")s (pid $pid, brokers $BROKERS, group $GROUP, ${what}log $LOGFILE)"
  echo "$DIR"
}

# stop_pid PID: SIGTERM, then SIGKILL after STOP_TIMEOUT; returns once it is gone.
stop_pid() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
  if alive "$pid"; then
    log "pid $pid still running after ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  fi
  rm -f "$PIDFILE"
}

cmd_stop() {
  local pid
  if pid=$(pid_of); then
    stop_pid "$pid"
    log "stopped pid $pid (its output stays in $DIR)"
  else
    log "not running"
  fi
}

cmd_status() {
  local pid
  if pid=$(pid_of); then
    if is_ready; then
      echo "running: pid $pid, dir $DIR"
      return 0
    fi
    echo "starting or unhealthy: pid $pid runs but its log does not say \"$READY_LINE\" (log: $LOGFILE)"
    return 3
  fi
  echo "not running"
  return 3
}

cmd_path() {
  key
  if [[ -x "$BIN" ]]; then
    echo "$BIN"
  else
    log "not built: run deploy/local/otelcol.sh build"
    return 3
  fi
}

case "${1:-}" in
  build) build; echo "$BIN" ;;
  path) cmd_path ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  logs) log_tail "${2:-100}" ;;
  *)
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
