#!/usr/bin/env bash
# deploy/local/kafka.sh — a real, single-node Apache Kafka broker for tests.
#
#   deploy/local/kafka.sh start    start (or reuse) the broker; prints the bootstrap address
#   deploy/local/kafka.sh stop     stop it (SIGTERM, then SIGKILL) and remove its data dir
#   deploy/local/kafka.sh status   exit 0 and say so if it runs and answers, else exit 3
#   deploy/local/kafka.sh env      print `export BRAID_KAFKA_BROKERS=...` and the SASL listeners' addresses
#   deploy/local/kafka.sh fetch    only download the broker jars into the cache
#   deploy/local/kafka.sh logs     print the tail of the broker log
#
# The broker is Kafka in KRaft mode, broker and controller in one JVM, no
# Docker: its jars (org.apache.kafka:kafka_2.13 and its runtime dependencies)
# come from Maven Central through `mvn` once, and are cached; later starts do
# no network work.
#
# Besides the PLAINTEXT listener that most tests use, the broker has (by
# default) two authenticated listeners for the tests of braid's Kafka security:
#
#   SASL_PLAINTEXT  127.0.0.1:PORT+2   mechanisms PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
#   SASL_SSL        127.0.0.1:PORT+3   the same over TLS: a server certificate for
#                                      127.0.0.1 and localhost, signed by a test CA
#                                      whose PEM is $BRAID_KAFKA_DIR/tls/ca.pem
#
# with one user, braid / braid-secret, for every mechanism (the SCRAM
# credentials are written at format time, PLAIN is checked against the
# listener's JAAS config). The CA and the broker's PKCS12 keystore are made
# with keytool once and kept in the cache. `env` also prints
# BRAID_KAFKA_SASL_BROKERS, BRAID_KAFKA_SASL_SSL_BROKERS and BRAID_KAFKA_CA_FILE
# for the listeners the broker has.
#
# Settings (environment):
#   BRAID_KAFKA_PORT           PLAINTEXT port on 127.0.0.1 (default 39092); the
#                              controller listens on PORT+1, SASL_PLAINTEXT on
#                              PORT+2, SASL_SSL on PORT+3
#   BRAID_KAFKA_SECURITY       listeners besides PLAINTEXT: sasl_ssl (default:
#                              SASL_PLAINTEXT and SASL_SSL), sasl_plaintext (only
#                              SASL_PLAINTEXT) or none
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
SASL_PORT=$((PORT + 2))
SSL_PORT=$((PORT + 3))
BROKERS="$HOST:$PORT"
SECURITY=${BRAID_KAFKA_SECURITY:-sasl_ssl}
# The one user of the SASL listeners, for every mechanism.
SASL_USER=braid
SASL_PASSWORD=braid-secret
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
SECURITY_FILE=$DIR/security   # the BRAID_KAFKA_SECURITY the running broker was started with
TLS_DIR=$DIR/tls              # the CA PEM for clients and the broker's keystore
TLS_CACHE=$CACHE/tls-v1       # keytool's output, kept between starts
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

check_security() {
  case "$SECURITY" in
    none | sasl_plaintext | sasl_ssl) ;;
    *) die "BRAID_KAFKA_SECURITY=$SECURITY: want none, sasl_plaintext or sasl_ssl" ;;
  esac
}

# ports prints the ports the broker listens on in mode $SECURITY.
ports() {
  echo "$PORT" "$CPORT"
  [[ "$SECURITY" == none ]] || echo "$SASL_PORT"
  [[ "$SECURITY" != sasl_ssl ]] || echo "$SSL_PORT"
}

any_port_open() {
  local p
  for p in $(ports); do
    if port_open "$p"; then return 0; fi
  done
  return 1
}

keytool_bin() {
  local java
  java=$(java_bin)
  java=$(readlink -f "$java" 2>/dev/null || echo "$java")
  if [[ -x "$(dirname "$java")/keytool" ]]; then
    echo "$(dirname "$java")/keytool"
  elif command -v keytool >/dev/null 2>&1; then
    command -v keytool
  else
    die "keytool not found (it comes with the Java that runs the broker)"
  fi
}

# tls_material makes, once, a test CA and a broker keystore signed by it in
# $TLS_CACHE (made anew after a year; the certificates last ten), and copies
# the CA PEM and the keystore to $TLS_DIR. A lock serialises concurrent starts.
tls_material() {
  local kt pw tmp t0
  mkdir -p "$CACHE"
  exec 7>"$CACHE/.tls-lock"
  flock 7
  if [[ ! -f "$TLS_CACHE/.complete" || -n "$(find "$TLS_CACHE/.complete" -mtime +365 2>/dev/null)" ]]; then
    t0=$EPOCHREALTIME
    tmp="$CACHE/tls.tmp.$$"
    rm -rf "$CACHE"/tls.tmp.* "$TLS_CACHE"
    mkdir -p "$tmp"
    pw=$(head -c 18 /dev/urandom | base64 | tr -d '+/=\n')
    echo "$pw" >"$tmp/password"
    local store=(-storetype PKCS12 -storepass "$pw") key=(-keyalg EC -groupname secp256r1 -validity 3650)
    # Seven short JVMs: the client compiler and the serial collector start faster.
    kt=("$(keytool_bin)" -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC)
    if ! {
      "${kt[@]}" -genkeypair -keystore "$tmp/ca.p12" "${store[@]}" "${key[@]}" -alias ca \
        -dname "CN=braid kafka.sh test CA" -ext bc:c=ca:true -ext KU=keyCertSign,cRLSign &&
        "${kt[@]}" -exportcert -rfc -keystore "$tmp/ca.p12" "${store[@]}" -alias ca -file "$tmp/ca.pem" &&
        "${kt[@]}" -genkeypair -keystore "$tmp/broker.p12" "${store[@]}" "${key[@]}" -alias broker -dname "CN=localhost" &&
        "${kt[@]}" -certreq -keystore "$tmp/broker.p12" "${store[@]}" -alias broker -file "$tmp/broker.csr" &&
        "${kt[@]}" -gencert -keystore "$tmp/ca.p12" "${store[@]}" -alias ca -rfc -validity 3650 \
          -infile "$tmp/broker.csr" -outfile "$tmp/broker.pem" \
          -ext SAN=ip:127.0.0.1,dns:localhost -ext KU=digitalSignature -ext EKU=serverAuth &&
        "${kt[@]}" -importcert -noprompt -keystore "$tmp/broker.p12" "${store[@]}" -alias ca -file "$tmp/ca.pem" &&
        "${kt[@]}" -importcert -noprompt -keystore "$tmp/broker.p12" "${store[@]}" -alias broker -file "$tmp/broker.pem"
    } >"$tmp/keytool.log" 2>&1; then
      cat "$tmp/keytool.log" >&2
      rm -rf "$tmp"
      exec 7>&-
      die "keytool could not make the test CA and the broker keystore"
    fi
    rm -f "$tmp/ca.p12" "$tmp/broker.csr"   # the CA's key is not needed again
    touch "$tmp/.complete"
    mv "$tmp" "$TLS_CACHE"
    log "made a test CA and a broker keystore in $TLS_CACHE in $(elapsed "$t0")s (once)"
  fi
  mkdir -p "$TLS_DIR"
  cp "$TLS_CACHE/ca.pem" "$TLS_CACHE/broker.p12" "$TLS_CACHE/password" "$TLS_DIR/"
  exec 7>&-
}

# security_config prints the broker settings of the SASL listeners.
security_config() {
  local l scram='org.apache.kafka.common.security.scram.ScramLoginModule required;'
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER=\"$SASL_PASSWORD\";"
  echo
  echo "# Authenticated listeners (BRAID_KAFKA_SECURITY=$SECURITY), one user: $SASL_USER."
  echo "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
  for l in sasl_plaintext sasl_ssl; do
    [[ "$l" == sasl_ssl && "$SECURITY" != sasl_ssl ]] && continue
    echo "listener.name.$l.plain.sasl.jaas.config=$plain"
    echo "listener.name.$l.scram-sha-256.sasl.jaas.config=$scram"
    echo "listener.name.$l.scram-sha-512.sasl.jaas.config=$scram"
  done
  if [[ "$SECURITY" == sasl_ssl ]]; then
    echo "listener.name.sasl_ssl.ssl.keystore.type=PKCS12"
    echo "listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/broker.p12"
    echo "listener.name.sasl_ssl.ssl.keystore.password=$(<"$TLS_DIR/password")"
    echo "listener.name.sasl_ssl.ssl.client.auth=none"
  fi
}

write_config() {
  mkdir -p "$DIR/data" "$DIR/logs"
  touch "$OWNER"
  local listeners="PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT"
  local protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if [[ "$SECURITY" != none ]]; then
    listeners+=",SASL_PLAINTEXT://$HOST:$SASL_PORT"
    protocols+=",SASL_PLAINTEXT:SASL_PLAINTEXT"
  fi
  if [[ "$SECURITY" == sasl_ssl ]]; then
    tls_material
    listeners+=",SASL_SSL://$HOST:$SSL_PORT"
    protocols+=",SASL_SSL:SASL_SSL"
  fi
  cat >"$DIR/server.properties" <<EOF
# Generated by deploy/local/kafka.sh: one node, broker and controller (KRaft).
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$CPORT
listeners=$listeners
advertised.listeners=$listeners
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
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

# Tests should not wait for rebalances, nor long for the coordinator to
# abort a transaction that timed out.
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000

# Small segments; a test broker keeps little.
log.segment.bytes=8388608
log.retention.check.interval.ms=300000
EOF
  [[ "$SECURITY" == none ]] || security_config >>"$DIR/server.properties"
  echo "$SECURITY" >"$SECURITY_FILE"
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
  local pid running
  check_security
  if pid=$(pid_of); then
    if ready -quick -timeout 15s -pid "$pid" 2>/dev/null; then
      running=$(cat "$SECURITY_FILE" 2>/dev/null || echo none)
      if [[ "$running" != "$SECURITY" ]]; then
        log "note: the running broker has BRAID_KAFKA_SECURITY=$running, not $SECURITY (stop it to change); env prints its listeners"
      fi
      log "already running (pid $pid)"
      echo "$BROKERS"
      return 0
    fi
    log "broker pid $pid runs but does not answer; restarting it"
    cmd_stop >/dev/null
  fi
  if any_port_open; then
    die "one of the ports $(ports | tr '\n' ' ')on $HOST is taken by another process (set BRAID_KAFKA_PORT)"
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
  local scram=()
  if [[ "$SECURITY" != none ]]; then
    scram=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]"
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]")
  fi
  # shellcheck disable=SC2046
  if ! "$java" $(jvm_opts) $(cds_opts) -cp "$LIBS/*" kafka.tools.StorageTool format \
      --standalone --cluster-id "$cluster_id" --config "$DIR/server.properties" "${scram[@]}" \
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
  if ! ready -timeout "${START_TIMEOUT}s" -pid "$pid" || ! extra_listeners_up; then
    log_tail 80
    log "broker did not come up within ${START_TIMEOUT}s; stopping it"
    cmd_stop >/dev/null 2>&1 || true
    exit 1
  fi
  local extra=
  [[ "$SECURITY" == none ]] || extra=", SASL_PLAINTEXT $HOST:$SASL_PORT"
  [[ "$SECURITY" != sasl_ssl ]] || extra+=", SASL_SSL $HOST:$SSL_PORT (CA $TLS_DIR/ca.pem)"
  log "Kafka $VERSION ready at $BROKERS$extra in $(elapsed "$t0")s (fetch+format $(elapsed "$t0" "$t1")s, \
then up and serving in $(elapsed "$t1")s; pid $pid, data $DIR, log $SERVER_LOG)"
  echo "$BROKERS"
}

# extra_listeners_up waits briefly until every listener accepts connections
# (the broker opens them all before it answers on PLAINTEXT).
extra_listeners_up() {
  local p deadline=$((SECONDS + 10))
  for p in $(ports); do
    until port_open "$p"; do
      if ((SECONDS >= deadline)); then
        log "port $p does not accept connections"
        return 1
      fi
      sleep 0.1
    done
  done
}

cmd_stop() {
  local pid
  # Wait for the ports of the mode the broker runs in.
  if [[ -f "$SECURITY_FILE" ]]; then SECURITY=$(<"$SECURITY_FILE"); fi
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
    while any_port_open && ((SECONDS < deadline)); do sleep 0.1; done
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

# cmd_env prints the addresses for `eval`: those of the running broker's
# mode, else of BRAID_KAFKA_SECURITY; it unsets those of listeners the mode
# lacks.
cmd_env() {
  if [[ -f "$SECURITY_FILE" ]] && pid_of >/dev/null; then
    SECURITY=$(<"$SECURITY_FILE")
  fi
  check_security
  echo "export BRAID_KAFKA_BROKERS=$BROKERS"
  if [[ "$SECURITY" == none ]]; then
    echo "unset BRAID_KAFKA_SASL_BROKERS"
  else
    echo "export BRAID_KAFKA_SASL_BROKERS=$HOST:$SASL_PORT"
  fi
  if [[ "$SECURITY" == sasl_ssl ]]; then
    echo "export BRAID_KAFKA_SASL_SSL_BROKERS=$HOST:$SSL_PORT"
    echo "export BRAID_KAFKA_CA_FILE=$TLS_DIR/ca.pem"
  else
    echo "unset BRAID_KAFKA_SASL_SSL_BROKERS BRAID_KAFKA_CA_FILE"
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  fetch) check_java; fetch; echo "$LIBS" ;;
  logs) log_tail "${2:-100}" ;;
  *)
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
