#!/usr/bin/env bash
# deploy/local/prometheus.sh — a real Prometheus server for tests and local dashboards.
#
#   deploy/local/prometheus.sh start    start (or reuse) it; prints its URL
#   deploy/local/prometheus.sh stop     stop it (SIGTERM, then SIGKILL) and remove its data dir
#   deploy/local/prometheus.sh status   exit 0 and say so if it runs and is ready, else exit 3
#   deploy/local/prometheus.sh env      print `export BRAID_PROMETHEUS_URL=...`
#   deploy/local/prometheus.sh reload   rewrite the config (BRAID_PROMETHEUS_TARGETS) and reload it
#   deploy/local/prometheus.sh logs     print the tail of its log
#
# One Prometheus process, no Docker, listening on 127.0.0.1 only, with
# exemplar storage and native histograms on
# (--enable-feature=exemplar-storage,native-histograms), so that the
# trace_id exemplars of braid's latency histograms can be queried
# (/api/v1/query_exemplars). Its generated config scrapes /metrics of every
# target in BRAID_PROMETHEUS_TARGETS every second (job "braid"), with
# honor_labels: true, since braid's LLM metrics carry the serving instance as
# label "instance" (a scrape without it renames that label exported_instance
# and the dashboard's per-instance panels lose it); `start` on a running
# server with other targets rewrites the config and reloads it.
#
# Tests that scrape an admin server of their own start their own instance
# with this script on a free port and a data dir of their own:
#
#   BRAID_PROMETHEUS_PORT=PORT BRAID_PROMETHEUS_DIR=DIR \
#     BRAID_PROMETHEUS_TARGETS=127.0.0.1:ADMINPORT deploy/local/prometheus.sh start
#
# and stop it with the same PORT and DIR.
#
# Settings (environment):
#   BRAID_PROMETHEUS_PORT           port on 127.0.0.1 (default 39190)
#   BRAID_PROMETHEUS_DIR            data dir, wiped on start and on stop
#                                   (default /tmp/braid-prometheus)
#   BRAID_PROMETHEUS_TARGETS        comma-separated host:port list to scrape at /metrics
#                                   (default 127.0.0.1:9464, braid's default admin address)
#   BRAID_PROMETHEUS_BIN            the binary (default: prometheus on PATH, Debian's /usr/bin/prometheus)
#   BRAID_PROMETHEUS_START_TIMEOUT  seconds to wait for /-/ready (default 60)
#   BRAID_PROMETHEUS_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 15)
set -euo pipefail

HOST=127.0.0.1
PORT=${BRAID_PROMETHEUS_PORT:-39190}
URL="http://$HOST:$PORT"
DIR=${BRAID_PROMETHEUS_DIR:-/tmp/braid-prometheus}
TARGETS=${BRAID_PROMETHEUS_TARGETS:-127.0.0.1:9464}
START_TIMEOUT=${BRAID_PROMETHEUS_START_TIMEOUT:-60}
STOP_TIMEOUT=${BRAID_PROMETHEUS_STOP_TIMEOUT:-15}

PIDFILE=$DIR/prometheus.pid
CONFIG=$DIR/prometheus.yml
LOGFILE=$DIR/prometheus.log
OWNER=$DIR/.braid-prometheus   # marks a dir this script made, so that only such a dir is ever wiped
BIN=                            # set by find_bin

# elapsed FROM: seconds since $EPOCHREALTIME value FROM, 0.1 s precision.
elapsed() {
  local from=${1/[.,]/} to=${EPOCHREALTIME/[.,]/}
  local d=$(((to - from) / 100000))
  printf '%d.%d' $((d / 10)) $((d % 10))
}
log() { printf 'prometheus.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

find_bin() {
  if [[ -n "${BRAID_PROMETHEUS_BIN:-}" ]]; then
    [[ -x "$BRAID_PROMETHEUS_BIN" ]] || die "BRAID_PROMETHEUS_BIN=$BRAID_PROMETHEUS_BIN is not an executable"
    BIN=$BRAID_PROMETHEUS_BIN
  elif command -v prometheus >/dev/null 2>&1; then
    BIN=$(command -v prometheus)
  else
    die "prometheus not found (Debian: apt-get install -y prometheus; or set BRAID_PROMETHEUS_BIN)"
  fi
}

check_settings() {
  [[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "BRAID_PROMETHEUS_PORT=$PORT is not a port"
  local t
  IFS=, read -ra t <<<"$TARGETS"
  ((${#t[@]} > 0)) || die "BRAID_PROMETHEUS_TARGETS is empty"
  for t in "${t[@]}"; do
    [[ "$t" =~ ^[A-Za-z0-9._-]+:[0-9]+$ || "$t" =~ ^\[[0-9A-Fa-f:.]+\]:[0-9]+$ ]] ||
      die "BRAID_PROMETHEUS_TARGETS: $t is not host:port"
  done
}

# pid_of prints the server's pid if the pid file names a live process that
# is our Prometheus (its command line names our data dir).
pid_of() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid=$(<"$PIDFILE")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  is_ours "$pid" || return 1
  echo "$pid"
}

# alive PID: whether PID is a live process (not a zombie).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# is_ours PID: whether PID is alive (not a zombie) and is our Prometheus.
is_ours() {
  alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "--storage.tsdb.path=$DIR/data "
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

# http METHOD PATH: one request to the server; prints the status code on
# the first line and the body after it. Fails when nothing answers within 5 s.
http() {
  (
    exec 3<>"/dev/tcp/$HOST/$PORT" || exit 1
    printf '%s %s HTTP/1.0\r\nHost: %s:%s\r\nContent-Length: 0\r\n\r\n' "$1" "$2" "$HOST" "$PORT" >&3
    IFS= read -r -t 5 line <&3 || exit 1
    [[ "$line" =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] || exit 1
    echo "${BASH_REMATCH[1]}"
    while IFS= read -r -t 5 line <&3 && [[ "${line%$'\r'}" != "" ]]; do :; done
    timeout 5 cat <&3 || true
  ) 2>/dev/null
}

is_ready() {
  local out
  out=$(http GET /-/ready) || return 1
  [[ "${out%%$'\n'*}" == 200 ]]
}

log_tail() {
  if [[ -s "$LOGFILE" ]]; then
    echo "----- last lines of $LOGFILE -----" >&2
    tail -n "${1:-40}" "$LOGFILE" >&2
  fi
}

wipe_dir() {
  [[ -n "$DIR" && "$DIR" != "/" && "$DIR" != "$HOME" ]] || die "refusing to wipe BRAID_PROMETHEUS_DIR=$DIR"
  if [[ -e "$DIR" ]]; then
    if [[ -f "$OWNER" ]] || [[ -d "$DIR" && -z "$(ls -A "$DIR")" ]]; then
      rm -rf "$DIR"
    else
      die "$DIR exists and was not made by prometheus.sh; refusing to wipe it (set BRAID_PROMETHEUS_DIR)"
    fi
  fi
}

# write_config writes the config for $TARGETS (into a temporary file first,
# so that a reload never reads half a file) and checks it with promtool when
# that is installed. It returns 1 when the config is unchanged.
write_config() {
  mkdir -p "$DIR/data"
  touch "$OWNER"
  local tmp="$CONFIG.tmp.$$" t list=()
  IFS=, read -ra list <<<"$TARGETS"
  {
    cat <<EOF
# Generated by deploy/local/prometheus.sh: scrape braid's /metrics every second.
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: braid
    metrics_path: /metrics
    # braid's LLM metrics carry the serving instance as label "instance":
    # it wins over the target's address.
    honor_labels: true
    static_configs:
      - targets:
EOF
    for t in "${list[@]}"; do echo "          - '$t'"; done
  } >"$tmp"
  if command -v promtool >/dev/null 2>&1 && ! promtool check config "$tmp" >"$DIR/promtool.log" 2>&1; then
    cat "$DIR/promtool.log" >&2
    rm -f "$tmp"
    die "promtool rejects the generated config"
  fi
  if [[ -f "$CONFIG" ]] && cmp -s "$tmp" "$CONFIG"; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$CONFIG"
}

# reload_running rewrites the config of the running server PID and makes it
# reload (SIGHUP) when the targets changed.
reload_running() {
  if write_config; then
    kill -HUP "$1"
    log "reloaded the config of pid $1: targets $TARGETS"
  fi
}

cmd_start() {
  local pid
  check_settings
  if pid=$(pid_of); then
    if is_ready; then
      reload_running "$pid"
      log "already running (pid $pid)"
      echo "$URL"
      return 0
    fi
    log "pid $pid runs but $URL/-/ready does not answer; restarting it"
    cmd_stop >/dev/null
  fi
  if port_open; then
    die "port $PORT on $HOST is taken by another process (set BRAID_PROMETHEUS_PORT)"
  fi
  find_bin
  local t0=$EPOCHREALTIME
  wipe_dir
  write_config || true
  # In the background with no inherited stdin/stdout/stderr, so that it
  # outlives the caller and never holds the caller's output pipe open.
  nohup "$BIN" --config.file="$CONFIG" --storage.tsdb.path="$DIR/data" \
    --web.listen-address="$HOST:$PORT" --storage.tsdb.retention.time=1d \
    --enable-feature=exemplar-storage,native-histograms \
    </dev/null >"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until is_ready; do
    # alive, not is_ours: until the child has exec'd the binary its
    # command line is this script's, and it would look gone.
    if ! alive "$pid"; then
      log_tail 60
      log "Prometheus exited before it was ready (port $PORT taken meanwhile? see the log above)"
      cmd_stop >/dev/null 2>&1 || true
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log_tail 60
      log "Prometheus did not become ready within ${START_TIMEOUT}s; stopping it"
      cmd_stop >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.1
  done
  log "Prometheus ready at $URL in $(elapsed "$t0")s (pid $pid, scraping $TARGETS every 1s, data $DIR, log $LOGFILE)"
  echo "$URL"
}

cmd_reload() {
  local pid
  check_settings
  pid=$(pid_of) || die "not running"
  reload_running "$pid"
}

cmd_stop() {
  local pid
  if pid=$(pid_of); then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while is_ours "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if is_ours "$pid"; then
      log "pid $pid still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while is_ours "$pid"; do sleep 0.1; done
    fi
    deadline=$((SECONDS + 10))
    while port_open && ((SECONDS < deadline)); do sleep 0.1; done
    log "stopped pid $pid"
  else
    log "not running"
  fi
  if [[ -e "$DIR" ]]; then wipe_dir; fi
}

cmd_status() {
  local pid
  if pid=$(pid_of); then
    if is_ready; then
      echo "running: pid $pid, $URL, data $DIR"
      return 0
    fi
    echo "starting or unhealthy: pid $pid runs but $URL/-/ready does not answer (log: $LOGFILE)"
    return 3
  fi
  echo "not running"
  return 3
}

cmd_env() {
  check_settings
  echo "export BRAID_PROMETHEUS_URL=$URL"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  reload) cmd_reload ;;
  logs) log_tail "${2:-100}" ;;
  *)
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
