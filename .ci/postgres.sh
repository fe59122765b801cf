#!/usr/bin/env bash
# Install (when absent) and start Debian's PostgreSQL for the tests, then write a URL with
# a password to .ci/.pg_url (git-ignored). Debian's pg_hba asks for scram over TCP, and the
# tests run as root, which peer authentication over the socket would refuse.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
VER="$(ls /usr/lib/postgresql | sort -n | tail -1)"
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$VER main"; then
  $SUDO pg_createcluster "$VER" main >/dev/null
fi
PORT="$(pg_lsclusters -h | awk -v v="$VER" '$1==v && $2=="main" {print $3}')"
$SUDO pg_ctlcluster "$VER" main start 2>/dev/null || true
for _ in $(seq 1 60); do
  pg_isready -q -h 127.0.0.1 -p "$PORT" && break
  sleep 0.5
done
pg_isready -h 127.0.0.1 -p "$PORT"
PASS="gpuq-ci"
$SUDO su postgres -c "psql -q -p $PORT -c \"ALTER USER postgres PASSWORD '$PASS'\"" >/dev/null
echo "postgresql+psycopg://postgres:$PASS@127.0.0.1:$PORT/postgres" > .pg_url
