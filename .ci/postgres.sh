#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1 for the trials storage tests.
# Usage (as root):  eval "$(.ci/postgres.sh)"   # prints `export GPUADVISOR_TEST_POSTGRES_URL=...`
# Installs Debian's postgresql if missing, creates a cluster in $PGTEST_DIR (default /tmp/gpuadvisor-pg),
# a user and a database with a random password. Progress goes to stderr; only the export line to stdout.
set -euo pipefail
PGTEST_DIR=${PGTEST_DIR:-/tmp/gpuadvisor-pg}
PGTEST_PORT=${PGTEST_PORT:-54329}
log() { echo "postgres.sh: $*" >&2; }

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  log "installing postgresql (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
BIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
id postgres >/dev/null 2>&1 || useradd --system --home "$PGTEST_DIR" postgres
runpg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }

PASSFILE="$PGTEST_DIR.password"
if [ ! -s "$PASSFILE" ]; then
  umask 077
  head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$PASSFILE"
fi
PASS=$(cat "$PASSFILE")
if [ ! -f "$PGTEST_DIR/PG_VERSION" ]; then
  mkdir -p "$PGTEST_DIR"
  chown postgres "$PGTEST_DIR" 2>/dev/null || true
  runpg "'$BIN/initdb' -D '$PGTEST_DIR' -A trust -U postgres >/dev/null"
  echo "host all all 127.0.0.1/32 scram-sha-256" > "$PGTEST_DIR/pg_hba.conf"
  echo "local all postgres trust" >> "$PGTEST_DIR/pg_hba.conf"
fi
if ! runpg "'$BIN/pg_ctl' -D '$PGTEST_DIR' status" >/dev/null 2>&1; then
  log "starting server on 127.0.0.1:$PGTEST_PORT"
  runpg "'$BIN/pg_ctl' -D '$PGTEST_DIR' -l '$PGTEST_DIR/server.log' -w \
    -o \"-c listen_addresses=127.0.0.1 -p $PGTEST_PORT -k $PGTEST_DIR\" start" >&2
fi
psql_() { runpg "'$BIN/psql' -h '$PGTEST_DIR' -p $PGTEST_PORT -U postgres -v ON_ERROR_STOP=1 -qAt $*"; }
if [ "$(psql_ "-c \"select 1 from pg_roles where rolname='gpuadvisor'\"")" != 1 ]; then
  psql_ "-c \"create role gpuadvisor login password '$PASS'\""
fi
if [ "$(psql_ "-c \"select 1 from pg_database where datname='gpuadvisor_test'\"")" != 1 ]; then
  psql_ "-c \"create database gpuadvisor_test owner gpuadvisor\""
fi
log "ready (password in $PASSFILE, mode 600)"
echo "export GPUADVISOR_TEST_POSTGRES_URL=postgresql://gpuadvisor:$PASS@127.0.0.1:$PGTEST_PORT/gpuadvisor_test"
