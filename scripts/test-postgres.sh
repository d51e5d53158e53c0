#!/usr/bin/env bash
# A throwaway PostgreSQL server for the durable-budget store tests (dpattn-store, issue 37).
#
# Sourced by scripts/test.sh: `pg_test_start` installs PostgreSQL when it is missing
# (Debian's `postgresql` package, with no cluster or service of its own), runs `initdb` into
# a temporary folder, starts the server on a free port of 127.0.0.1 only, and exports
#   DPATTN_TEST_POSTGRES      a libpq connection string for the tests
#   DPATTN_REQUIRE_POSTGRES=1 so the PostgreSQL tests fail (not skip) without a server;
# `pg_test_stop` stops it and removes the folder. PostgreSQL refuses to run as root: as
# root the server runs as the `postgres` user (created by the package; created here if
# absent). Run directly, it wraps one command:
#   bash scripts/test-postgres.sh cargo test -p dpattn-store
set -euo pipefail

pg_test_die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

# The folder holding initdb and pg_ctl, or nothing.
pg_test_bindir() {
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(command -v initdb)"
        return
    fi
    { compgen -G '/usr/lib/postgresql/*/bin/initdb' || true; } | sort -V | tail -n 1 | xargs -r dirname
}

pg_test_install() {
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null \
            || pg_test_die "PostgreSQL is not installed and this user cannot install it: apt-get install postgresql (as root)"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null \
        || pg_test_die "PostgreSQL (initdb, pg_ctl) not found and no apt-get to install it: install PostgreSQL 13 or newer"
    # Debian's package creates and starts a `main` cluster unless told not to; the tests
    # need only the binaries (their server is started below, in a temporary folder).
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
        "${sudo[@]}" mkdir -p /etc/postgresql-common
        echo 'create_main_cluster = false' | "${sudo[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
    fi
    echo "installing PostgreSQL (apt-get install postgresql)"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null \
        || { "${sudo[@]}" apt-get update >/dev/null \
             && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null; } \
        || pg_test_die "apt-get could not install postgresql"
}

# Runs a command as the server's user (root cannot run PostgreSQL).
pg_test_as_user() {
    if [ "$(id -u)" = 0 ]; then
        if command -v runuser >/dev/null; then
            runuser -u "$PG_TEST_USER" -- "$@"
        else
            su -s /bin/sh "$PG_TEST_USER" -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

pg_test_start() {
    local bindir port
    bindir=$(pg_test_bindir)
    if [ -z "$bindir" ]; then
        pg_test_install
        bindir=$(pg_test_bindir)
        [ -n "$bindir" ] || pg_test_die "PostgreSQL was installed but initdb was not found"
    fi
    PG_TEST_USER=$(id -un)
    if [ "$(id -u)" = 0 ]; then
        PG_TEST_USER=postgres
        id -u "$PG_TEST_USER" >/dev/null 2>&1 \
            || useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_TEST_USER" \
            || pg_test_die "could not create the user $PG_TEST_USER to run PostgreSQL (it refuses to run as root)"
    fi
    PG_TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dpattn-pg.XXXXXX")
    PG_TEST_BIN=$bindir
    [ "$(id -u)" != 0 ] || chown "$PG_TEST_USER" "$PG_TEST_DIR"
    chmod 700 "$PG_TEST_DIR"
    ( cd "$PG_TEST_DIR" && pg_test_as_user "$bindir/initdb" -D "$PG_TEST_DIR/data" -U dpattn \
        -A trust -E UTF8 --locale=C --no-sync >"$PG_TEST_DIR/initdb.log" 2>&1 ) \
        || { cat "$PG_TEST_DIR/initdb.log" >&2; pg_test_die "initdb failed"; }
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
        || pg_test_die "python3 could not pick a free port"
    ( cd "$PG_TEST_DIR" && pg_test_as_user "$bindir/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/server.log" \
        -w -t 60 -o "-c listen_addresses=127.0.0.1 -p $port -k $PG_TEST_DIR -c max_connections=200" start >/dev/null ) \
        || { cat "$PG_TEST_DIR/server.log" >&2; pg_test_die "the PostgreSQL test server did not start"; }
    export DPATTN_TEST_POSTGRES="host=127.0.0.1 port=$port user=dpattn dbname=postgres"
    export DPATTN_REQUIRE_POSTGRES=1
    echo "$("$bindir/postgres" --version) on 127.0.0.1:$port (data in $PG_TEST_DIR, user $PG_TEST_USER)"
}

pg_test_stop() {
    [ -n "${PG_TEST_DIR:-}" ] || return 0
    ( cd "$PG_TEST_DIR" && pg_test_as_user "$PG_TEST_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -m fast -w stop >/dev/null 2>&1 ) || true
    rm -rf "$PG_TEST_DIR"
    PG_TEST_DIR=
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    [ $# -gt 0 ] || pg_test_die "usage: bash scripts/test-postgres.sh COMMAND [ARG...]"
    trap pg_test_stop EXIT
    pg_test_start
    "$@"
fi
