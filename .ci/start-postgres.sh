#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for the store's contract tests; prints the SQLAlchemy URL.
# Usage: eval "$(.ci/start-postgres.sh)"   (exports RUBRIC_MONITOR_TEST_POSTGRES_URL)
set -euo pipefail
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -n "$bindir" ]] || { echo "no PostgreSQL server installed" >&2; exit 1; }
data=$(mktemp -d /tmp/rm-pg.XXXXXX)
chown postgres: "$data" 2>/dev/null || true
port=${PGPORT_TEST:-55432}
as_pg() { if [[ $(id -u) == 0 ]]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }
as_pg "'$bindir/initdb' -D '$data' -U postgres --auth=trust >/dev/null"
as_pg "'$bindir/pg_ctl' -D '$data' -o \"-c listen_addresses=127.0.0.1 -p $port -k $data\" -l '$data/log' -w start >/dev/null"
as_pg "'$bindir/createdb' -h 127.0.0.1 -p $port -U postgres rubric_monitor_test"
echo "export RUBRIC_MONITOR_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$port/rubric_monitor_test"
echo "export RUBRIC_MONITOR_TEST_POSTGRES_DATA=$data"
