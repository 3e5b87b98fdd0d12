#!/usr/bin/env bash
# deploy/local/kafka.sh — a real, single-node Apache Kafka broker for tests.
#
#   deploy/local/kafka.sh start    start (or reuse) the broker; prints the bootstrap address
#   deploy/local/kafka.sh stop     stop it (SIGTERM, then SIGKILL) and remove its data dir
#   deploy/local/kafka.sh status   exit 0 and say so if it runs and answers, else exit 3
#   deploy/local/kafka.sh env      print `export BRAID_KAFKA_BROKERS=...`
#   deploy/local/kafka.sh fetch    only download the broker jars into the cache
#   deploy/local/kafka.sh logs     print the tail of the broker log
#
# The broker is Kafka in KRaft mode, broker and controller in one JVM, no
# Docker: its jars (org.apache.kafka:kafka_2.13 and its runtime dependencies)
# come from Maven Central through `mvn` once, and are cached; later starts do
# no network work.
#
# Settings (environment):
#   BRAID_KAFKA_PORT           PLAINTEXT port on 127.0.0.1 (default 39092); the
#                              controller listens on PORT+1
#   BRAID_KAFKA_DIR            data dir, wiped on start and on stop (default /tmp/braid-kafka)
#   BRAID_CACHE_DIR            cache root (default ~/.cache/braid); jars go to
#                              $BRAID_CACHE_DIR/kafka-<version>/libs
#   BRAID_KAFKA_VERSION        Kafka version (default 4.4.0)
#   BRAID_KAFKA_START_TIMEOUT  seconds to wait for the broker to answer (default 90)
#   BRAID_KAFKA_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 30)
#   BRAID_KAFKA_HEAP           JVM max heap (default 1g)
#   BRAID_KAFKA_CDS            1 (default): keep a class data sharing archive of
#                              the broker's classes in the cache (made on the first
#                              clean stop), which makes later starts several times
#                              faster; 0: do not
#   BRAID_KAFKA_JVM_OPTS       extra JVM options for the broker
#   BRAID_MAVEN_REPO_LOCAL     optional -Dmaven.repo.local for the download
#   JAVA_HOME                  Java 17+ to run the broker (default: java on PATH)
set -euo pipefail

VERSION=${BRAID_KAFKA_VERSION:-4.4.0}
SCALA=2.13
HOST=127.0.0.1
PORT=${BRAID_KAFKA_PORT:-39092}
CPORT=$((PORT + 1))
BROKERS="$HOST:$PORT"
DIR=${BRAID_KAFKA_DIR:-/tmp/braid-kafka}
CACHE=${BRAID_CACHE_DIR:-$HOME/.cache/braid}/kafka-$VERSION
LIBS=$CACHE/libs
MARKER=$CACHE/.libs-complete
START_TIMEOUT=${BRAID_KAFKA_START_TIMEOUT:-90}
STOP_TIMEOUT=${BRAID_KAFKA_STOP_TIMEOUT:-30}
HEAP=${BRAID_KAFKA_HEAP:-1g}
CDS=${BRAID_KAFKA_CDS:-1}
CDS_ARCHIVE=   # set by check_java: the archive for this JVM, in the cache
# Pinned so that the download does not depend on Maven's default plugin version.
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
# Matches the log4j-core that kafka_2.13 pulls in; routes Kafka's slf4j logging to log4j2.
LOG4J_VERSION=2.25.5

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SELF_DIR/../.." && pwd)
PIDFILE=$DIR/broker.pid
CDS_NEW=$DIR/cds.jsa            # an archive the running broker dumps when it exits
CDS_TARGET=$DIR/cds.target      # where stop moves it to
OWNER=$DIR/.braid-kafka   # marks a dir this script made, so that only such a dir is ever wiped
SERVER_LOG=$DIR/logs/server.log
STDOUT_LOG=$DIR/logs/stdout.log
READY_BIN=   # set by build_ready

# elapsed FROM [TO]: seconds between two $EPOCHREALTIME values (TO: now), 0.1 s precision.
elapsed() {
  local from=${1/[.,]/} to=${2:-$EPOCHREALTIME}
  to=${to/[.,]/}
  local d=$(((to - from) / 100000))
  printf '%d.%d' $((d / 10)) $((d % 10))
}
log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

java_bin() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    echo "$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    command -v java
  else
    die "java not found: Kafka $VERSION needs Java 17+ (Debian: apt-get install -y openjdk-17-jre-headless)"
  fi
}

check_java() {
  local java props major vm
  java=$(java_bin)
  props=$("$java" -XshowSettings:properties -version 2>&1)
  major=$(awk -F'= ' '/java.specification.version/ {print $2}' <<<"$props")
  major=${major%%.*}
  [[ "$major" =~ ^[0-9]+$ && "$major" -ge 17 ]] || die "$java is Java ${major:-?}; Kafka $VERSION needs Java 17+"
  # A CDS archive only fits the JVM build that made it.
  vm=$(awk -F'= ' '/java.vm.version/ {print $2}' <<<"$props" | tr -c 'A-Za-z0-9._\n-' '_')
  CDS_ARCHIVE=$CACHE/cds/kafka-$(cksum <<<"$java $vm" | cut -d' ' -f1)-$vm.jsa
}

# fetch downloads the broker's jars once. A marker file written last makes a
# later call a no-op without any network work; a lock serialises concurrent calls.
fetch() {
  if [[ -f "$MARKER" ]]; then return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: needed once to fetch Kafka $VERSION (Debian: apt-get install -y maven)"
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"
  flock 8
  if [[ -f "$MARKER" ]]; then exec 8>&-; return 0; fi
  log "fetching org.apache.kafka:kafka_$SCALA:$VERSION and its runtime dependencies from Maven Central (once) ..."
  cat >"$CACHE/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/local/kafka.sh: the jars of a Kafka $VERSION broker. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.braid</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>$VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$SCALA</artifactId>
      <version>$VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  local tmp="$CACHE/libs.tmp.$$" mvnargs=(-B -q -f "$CACHE/pom.xml")
  [[ -n "${BRAID_MAVEN_REPO_LOCAL:-}" ]] && mvnargs+=("-Dmaven.repo.local=$BRAID_MAVEN_REPO_LOCAL")
  rm -rf "$CACHE"/libs.tmp.* "$LIBS"   # leftovers of an interrupted fetch; we hold the lock
  if ! mvn "${mvnargs[@]}" "$DEP_PLUGIN:copy-dependencies" \
      -DincludeScope=runtime -DoutputDirectory="$tmp" >"$CACHE/mvn.log" 2>&1; then
    tail -n 40 "$CACHE/mvn.log" >&2 || true
    rm -rf "$tmp"
    die "mvn could not fetch Kafka $VERSION (full log: $CACHE/mvn.log)"
  fi
  [[ -f "$tmp/kafka_$SCALA-$VERSION.jar" ]] || die "mvn ran but $tmp/kafka_$SCALA-$VERSION.jar is missing"
  mv "$tmp" "$LIBS"
  echo "org.apache.kafka:kafka_$SCALA:$VERSION $(date -u +%FT%TZ)" >"$MARKER"
  log "cached $(ls "$LIBS" | wc -l) jars in $LIBS"
  exec 8>&-
}

# pid_of prints the broker's pid if the pid file names a live process that is
# our broker (its command line names kafka.Kafka and our data dir).
pid_of() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid=$(<"$PIDFILE")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  is_broker "$pid" || return 1
  echo "$pid"
}

# is_broker PID: whether PID is alive (not a zombie) and is our broker.
is_broker() {
  kill -0 "$1" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $DIR/"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# build_ready builds deploy/local/kafkaready into the cache once per version
# of its source, go.mod, go.sum and Go.
build_ready() {
  command -v go >/dev/null 2>&1 || die "go not found (needed to build deploy/local/kafkaready)"
  local key
  key=$(cd "$REPO_ROOT" && { cat deploy/local/kafkaready/*.go go.mod go.sum; go version; } | sha256sum | cut -c1-16)
  READY_BIN=$CACHE/bin/kafkaready-$key
  [[ -x "$READY_BIN" ]] && return 0
  mkdir -p "$CACHE/bin"
  # Old builds go after a day (not at once: another checkout may be using one).
  find "$CACHE/bin" -name 'kafkaready-*' -mtime +1 -delete 2>/dev/null || true
  (cd "$REPO_ROOT" && go build -o "$READY_BIN.tmp.$$" ./deploy/local/kafkaready) && mv -f "$READY_BIN.tmp.$$" "$READY_BIN"
}

# ready waits until the broker answers; extra flags go to kafkaready.
ready() {
  [[ -n "$READY_BIN" ]] || build_ready
  "$READY_BIN" -brokers "$BROKERS" "$@"
}

log_tail() {
  local f
  for f in "$STDOUT_LOG" "$SERVER_LOG"; do
    if [[ -s "$f" ]]; then
      echo "----- last lines of $f -----" >&2
      tail -n "${1:-60}" "$f" >&2
    fi
  done
}

wipe_dir() {
  [[ -n "$DIR" && "$DIR" != "/" && "$DIR" != "$HOME" ]] || die "refusing to wipe BRAID_KAFKA_DIR=$DIR"
  if [[ -e "$DIR" ]]; then
    if [[ -f "$OWNER" ]] || [[ -d "$DIR" && -z "$(ls -A "$DIR")" ]]; then
      rm -rf "$DIR"
    else
      die "$DIR exists and was not made by kafka.sh; refusing to wipe it (set BRAID_KAFKA_DIR)"
    fi
  fi
}

write_config() {
  mkdir -p "$DIR/data" "$DIR/logs"
  cat >"$DIR/server.properties" <<EOF
# Generated by deploy/local/kafka.sh: one node, broker and controller (KRaft).
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DIR/data

num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1

num.partitions=4
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true

# Internal topics: one replica, and few partitions so that they come up fast.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Tests should not wait for rebalances.
group.initial.rebalance.delay.ms=0

# Small segments; a test broker keeps little.
log.segment.bytes=8388608
log.retention.check.interval.ms=300000
EOF
  cat >"$DIR/log4j2.properties" <<EOF
# Generated by deploy/local/kafka.sh: everything to $SERVER_LOG, nothing to the console.
status = warn
name = braid-kafka
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $SERVER_LOG
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
logger.zk.name = org.apache.zookeeper
logger.zk.level = WARN
EOF
  touch "$OWNER"
}

jvm_opts() {
  echo -Xms256m "-Xmx$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=file:$DIR/log4j2.properties" \
    "-Dkafka.logs.dir=$DIR/logs" ${BRAID_KAFKA_JVM_OPTS:-}
}

# cds_opts prints the JVM options for class data sharing: use the cached
# archive, or (for the broker, $1=dump) make one when it exits.
cds_opts() {
  [[ "$CDS" == 1 && -n "$CDS_ARCHIVE" ]] || return 0
  if [[ -s "$CDS_ARCHIVE" ]]; then
    echo "-XX:SharedArchiveFile=$CDS_ARCHIVE"
  elif [[ "${1:-}" == dump ]]; then
    echo "$CDS_ARCHIVE" >"$CDS_TARGET"
    echo "-XX:ArchiveClassesAtExit=$CDS_NEW"
  fi
}

# keep_cds moves the archive that a broker dumped on a clean exit into the cache.
keep_cds() {
  [[ -s "$CDS_NEW" && -s "$CDS_TARGET" ]] || return 0
  local target tmp
  target=$(<"$CDS_TARGET")
  tmp="$target.tmp.$$"
  mkdir -p "$(dirname "$target")"
  if cp "$CDS_NEW" "$tmp" && mv -f "$tmp" "$target"; then
    log "cached a class data sharing archive for faster starts: $target"
  else
    rm -f "$tmp"
  fi
}

cmd_start() {
  local pid
  if pid=$(pid_of); then
    if ready -quick -timeout 15s -pid "$pid" 2>/dev/null; then
      log "already running (pid $pid)"
      echo "$BROKERS"
      return 0
    fi
    log "broker pid $pid runs but does not answer; restarting it"
    cmd_stop >/dev/null
  fi
  if port_open "$PORT" || port_open "$CPORT"; then
    die "port $PORT or $CPORT on $HOST is taken by another process (set BRAID_KAFKA_PORT)"
  fi

  local t0=$EPOCHREALTIME t1 java cluster_id
  check_java
  fetch
  wipe_dir
  write_config

  java=$(java_bin)
  # A cluster id is 16 random bytes in unpadded URL-safe base64; one that
  # starts with '-' would be taken for an option by kafka-storage.
  cluster_id=-
  while [[ "$cluster_id" == -* ]]; do
    cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  done
  # shellcheck disable=SC2046
  if ! "$java" $(jvm_opts) $(cds_opts) -cp "$LIBS/*" kafka.tools.StorageTool format \
      --standalone --cluster-id "$cluster_id" --config "$DIR/server.properties" \
      >"$DIR/logs/format.log" 2>&1; then
    cat "$DIR/logs/format.log" >&2
    die "formatting the KRaft storage in $DIR/data failed"
  fi

  t1=$EPOCHREALTIME
  # In the background with no inherited stdin/stdout/stderr, so that it
  # outlives the caller and never holds the caller's output pipe open (a
  # background job of a script also ignores SIGINT, nohup adds SIGHUP).
  # shellcheck disable=SC2046
  nohup "$java" $(jvm_opts) $(cds_opts dump) -cp "$LIBS/*" kafka.Kafka "$DIR/server.properties" \
    </dev/null >"$STDOUT_LOG" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"

  build_ready
  if ! ready -timeout "${START_TIMEOUT}s" -pid "$pid"; then
    log_tail 80
    log "broker did not come up within ${START_TIMEOUT}s; stopping it"
    cmd_stop >/dev/null 2>&1 || true
    exit 1
  fi
  log "Kafka $VERSION ready at $BROKERS in $(elapsed "$t0")s (fetch+format $(elapsed "$t0" "$t1")s, \
then up and serving in $(elapsed "$t1")s; pid $pid, data $DIR, log $SERVER_LOG)"
  echo "$BROKERS"
}

cmd_stop() {
  local pid
  if pid=$(pid_of); then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while is_broker "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
    if is_broker "$pid"; then
      log "broker pid $pid still running after ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while is_broker "$pid"; do sleep 0.1; done
      rm -f "$CDS_NEW"   # possibly half written
    fi
    # Its threads may still be closing its sockets; a start right after must find the ports free.
    deadline=$((SECONDS + 10))
    while { port_open "$PORT" || port_open "$CPORT"; } && ((SECONDS < deadline)); do sleep 0.1; done
    keep_cds
    log "stopped broker pid $pid"
  else
    log "no broker running"
  fi
  if [[ -e "$DIR" ]]; then wipe_dir; fi
}

cmd_status() {
  local pid
  if pid=$(pid_of); then
    if ready -quick -timeout 10s -pid "$pid" 2>/dev/null; then
      echo "running: pid $pid, brokers $BROKERS, data $DIR"
      return 0
    fi
    echo "starting or unhealthy: pid $pid runs but $BROKERS does not answer (log: $SERVER_LOG)"
    return 3
  fi
  echo "not running"
  return 3
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export BRAID_KAFKA_BROKERS=$BROKERS" ;;
  fetch) check_java; fetch; echo "$LIBS" ;;
  logs) log_tail "${2:-100}" ;;
  *)
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
