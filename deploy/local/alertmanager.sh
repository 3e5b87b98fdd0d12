#!/usr/bin/env bash
# deploy/local/alertmanager.sh — a real Prometheus Alertmanager for tests.
#
#   deploy/local/alertmanager.sh start    start (or reuse) it; prints its URL
#   deploy/local/alertmanager.sh stop     stop it (SIGTERM, then SIGKILL) and remove its data dir
#   deploy/local/alertmanager.sh status   exit 0 and say so if it runs and is ready, else exit 3
#   deploy/local/alertmanager.sh env      print `export BRAID_ALERTMANAGER_URL=...`
#   deploy/local/alertmanager.sh reload   rewrite the config (BRAID_ALERTMANAGER_WEBHOOK) and reload it
#   deploy/local/alertmanager.sh logs     print the tail of its log
#
# One Alertmanager process, no Docker, clustering off, listening on
# 127.0.0.1 only. Its generated config sends every notification to one
# webhook receiver, with send_resolved: true, and groups by every label
# (group_by: ['...']), so that each alert is a notification group of its
# own; group_wait and group_interval are 1s, so that tests see a
# notification about a second after a change, and repeat_interval is 4h, so
# that a second notification of an unchanged alert within a test is a
# duplicate.
#
# Tests that need a webhook of their own start their own instance with this
# script on a free port and a data dir of their own:
#
#   BRAID_ALERTMANAGER_PORT=PORT BRAID_ALERTMANAGER_DIR=DIR \
#     BRAID_ALERTMANAGER_WEBHOOK=URL deploy/local/alertmanager.sh start
#
# and stop it with the same PORT and DIR.
#
# Settings (environment):
#   BRAID_ALERTMANAGER_PORT           port on 127.0.0.1 (default 39193)
#   BRAID_ALERTMANAGER_DIR            data dir, wiped on start and on stop
#                                     (default /tmp/braid-alertmanager)
#   BRAID_ALERTMANAGER_WEBHOOK        the webhook receiver's URL
#                                     (default http://127.0.0.1:39194/hook)
#   BRAID_ALERTMANAGER_BIN            the binary (default: prometheus-alertmanager,
#                                     Debian's name, else alertmanager, on PATH)
#   BRAID_ALERTMANAGER_START_TIMEOUT  seconds to wait for /-/ready (default 30)
#   BRAID_ALERTMANAGER_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 10)
set -euo pipefail

HOST=127.0.0.1
PORT=${BRAID_ALERTMANAGER_PORT:-39193}
URL="http://$HOST:$PORT"
DIR=${BRAID_ALERTMANAGER_DIR:-/tmp/braid-alertmanager}
WEBHOOK=${BRAID_ALERTMANAGER_WEBHOOK:-http://127.0.0.1:39194/hook}
START_TIMEOUT=${BRAID_ALERTMANAGER_START_TIMEOUT:-30}
STOP_TIMEOUT=${BRAID_ALERTMANAGER_STOP_TIMEOUT:-10}

PIDFILE=$DIR/alertmanager.pid
CONFIG=$DIR/alertmanager.yml
LOGFILE=$DIR/alertmanager.log
OWNER=$DIR/.braid-alertmanager   # marks a dir this script made, so that only such a dir is ever wiped
BIN=                              # set by find_bin

# elapsed FROM: seconds since $EPOCHREALTIME value FROM, 0.1 s precision.
elapsed() {
  local from=${1/[.,]/} to=${EPOCHREALTIME/[.,]/}
  local d=$(((to - from) / 100000))
  printf '%d.%d' $((d / 10)) $((d % 10))
}
log() { printf 'alertmanager.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

find_bin() {
  if [[ -n "${BRAID_ALERTMANAGER_BIN:-}" ]]; then
    [[ -x "$BRAID_ALERTMANAGER_BIN" ]] || die "BRAID_ALERTMANAGER_BIN=$BRAID_ALERTMANAGER_BIN is not an executable"
    BIN=$BRAID_ALERTMANAGER_BIN
  elif command -v prometheus-alertmanager >/dev/null 2>&1; then
    BIN=$(command -v prometheus-alertmanager)
  elif command -v alertmanager >/dev/null 2>&1; then
    BIN=$(command -v alertmanager)
  else
    die "Alertmanager not found (Debian: apt-get install -y prometheus-alertmanager; or set BRAID_ALERTMANAGER_BIN)"
  fi
}

check_settings() {
  [[ "$PORT" =~ ^[0-9]+$ ]] && ((PORT > 0 && PORT < 65536)) || die "BRAID_ALERTMANAGER_PORT=$PORT is not a port"
  [[ "$WEBHOOK" =~ ^https?://[^[:space:]]+$ ]] || die "BRAID_ALERTMANAGER_WEBHOOK=$WEBHOOK is not an http(s) URL"
}

# pid_of prints the Alertmanager's pid if the pid file names a live process
# that is our Alertmanager (its command line names our data dir).
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

# is_ours PID: whether PID is alive (not a zombie) and is our Alertmanager.
is_ours() {
  alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "--storage.path=$DIR/data "
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }

# http METHOD PATH: one request to the Alertmanager; prints the status code
# on the first line and the body after it. Fails when nothing answers
# within 5 s.
http() {
  (
    exec 3<>"/dev/tcp/$HOST/$PORT" || exit 1
    printf '%s %s HTTP/1.0\r\nHost: %s:%s\r\nContent-Length: 0\r\n\r\n' "$1" "$2" "$HOST" "$PORT" >&3
    IFS= read -r -t 5 line <&3 || exit 1
    [[ "$line" =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] || exit 1
    echo "${BASH_REMATCH[1]}"
    # Headers, then the body (HTTP/1.0: the server closes the connection).
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
  [[ -n "$DIR" && "$DIR" != "/" && "$DIR" != "$HOME" ]] || die "refusing to wipe BRAID_ALERTMANAGER_DIR=$DIR"
  if [[ -e "$DIR" ]]; then
    if [[ -f "$OWNER" ]] || [[ -d "$DIR" && -z "$(ls -A "$DIR")" ]]; then
      rm -rf "$DIR"
    else
      die "$DIR exists and was not made by alertmanager.sh; refusing to wipe it (set BRAID_ALERTMANAGER_DIR)"
    fi
  fi
}

# write_config writes the config for $WEBHOOK (into a temporary file first,
# so that a reload never reads half a file) and checks it with amtool when
# that is installed.
write_config() {
  mkdir -p "$DIR/data"
  touch "$OWNER"
  local tmp="$CONFIG.tmp.$$" quoted=${WEBHOOK//\'/\'\'}
  cat >"$tmp" <<EOF
# Generated by deploy/local/alertmanager.sh: every alert its own group, one webhook.
route:
  receiver: braid-webhook
  group_by: ['...']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 4h
receivers:
  - name: braid-webhook
    webhook_configs:
      - url: '$quoted'
        send_resolved: true
EOF
  local amtool
  amtool=$(command -v amtool 2>/dev/null || true)
  if [[ -n "$amtool" ]] && ! "$amtool" check-config "$tmp" >"$DIR/check-config.log" 2>&1; then
    cat "$DIR/check-config.log" >&2
    rm -f "$tmp"
    die "amtool rejects the generated config"
  fi
  mv -f "$tmp" "$CONFIG"
}

# running_webhook prints the webhook URL of the running instance's config.
running_webhook() {
  sed -n "s/^      - url: '\(.*\)'\$/\1/p" "$CONFIG" 2>/dev/null | sed "s/''/'/g"
}

cmd_start() {
  local pid
  check_settings
  if pid=$(pid_of); then
    if is_ready; then
      local running
      running=$(running_webhook)
      if [[ "$running" != "$WEBHOOK" ]]; then
        log "note: the running Alertmanager posts to $running, not $WEBHOOK (reload to change)"
      fi
      log "already running (pid $pid)"
      echo "$URL"
      return 0
    fi
    log "Alertmanager pid $pid runs but is not ready; restarting it"
    cmd_stop >/dev/null
  fi
  if port_open; then
    die "port $PORT on $HOST is taken by another process (set BRAID_ALERTMANAGER_PORT)"
  fi

  local t0=$EPOCHREALTIME version
  find_bin
  version=$("$BIN" --version 2>&1 | sed -n 's/^alertmanager, version \([^ ]*\).*/\1/p' | head -n 1)
  wipe_dir
  write_config

  # In the background with no inherited stdin/stdout/stderr, so that it
  # outlives the caller and never holds the caller's output pipe open.
  nohup "$BIN" --config.file="$CONFIG" --storage.path="$DIR/data" \
    --web.listen-address="$HOST:$PORT" --cluster.listen-address= \
    --log.level=info </dev/null >"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"

  local deadline=$((SECONDS + START_TIMEOUT))
  until is_ready; do
    # alive, not is_ours: until the child has exec'd the binary its
    # command line is this script's, and it would look gone.
    if ! alive "$pid"; then
      log_tail
      rm -f "$PIDFILE"
      # Taken between the check above and the bind: say so, so that a
      # caller picking free ports (amtest) tries another.
      if grep -q 'address already in use' "$LOGFILE" 2>/dev/null; then
        die "port $PORT on $HOST is taken by another process (set BRAID_ALERTMANAGER_PORT)"
      fi
      die "Alertmanager exited during start"
    fi
    if ((SECONDS >= deadline)); then
      log_tail
      log "Alertmanager was not ready within ${START_TIMEOUT}s; stopping it"
      cmd_stop >/dev/null 2>&1 || true
      exit 1
    fi
    sleep 0.1
  done
  log "Alertmanager ${version:-?} ready at $URL in $(elapsed "$t0")s (webhook $WEBHOOK; pid $pid, data $DIR, log $LOGFILE)"
  echo "$URL"
}

cmd_stop() {
  local pid
  if pid=$(pid_of); then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while is_ours "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if is_ours "$pid"; then
      log "Alertmanager pid $pid still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while is_ours "$pid"; do sleep 0.1; done
    fi
    deadline=$((SECONDS + 10))
    while port_open && ((SECONDS < deadline)); do sleep 0.1; done
    log "stopped Alertmanager pid $pid"
  else
    log "no Alertmanager running"
  fi
  if [[ -e "$DIR" ]]; then wipe_dir; fi
}

cmd_status() {
  local pid
  if pid=$(pid_of); then
    if is_ready; then
      echo "running: pid $pid, $URL, webhook $(running_webhook), data $DIR"
      return 0
    fi
    echo "starting or unhealthy: pid $pid runs but $URL/-/ready does not answer 200 (log: $LOGFILE)"
    return 3
  fi
  echo "not running"
  return 3
}

cmd_reload() {
  local pid out
  check_settings
  pid=$(pid_of) || die "no Alertmanager running (start it first)"
  write_config
  out=$(http POST /-/reload) || die "Alertmanager at $URL does not answer"
  if [[ "${out%%$'\n'*}" != 200 ]]; then
    printf '%s\n' "${out#*$'\n'}" >&2
    die "Alertmanager rejected the reload (status ${out%%$'\n'*})"
  fi
  log "reloaded Alertmanager pid $pid: webhook $WEBHOOK"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) check_settings; echo "export BRAID_ALERTMANAGER_URL=$URL" ;;
  reload) cmd_reload ;;
  logs) log_tail "${2:-100}" ;;
  *)
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
