#!/bin/sh
# Decommission this host's Spark worker together with its sidecar silo: the silo first, so the
# work it would get goes elsewhere before the host is taken away.
#
# Run it wherever the host's removal is announced: in place of Spark's own
# sbin/decommission-worker.sh (standalone; the worker needs spark.decommission.enabled=true), from
# a spot-instance termination notice, a scale-in hook or a YARN NodeManager's graceful
# decommission. As root or the silo user: under mutual TLS only a *silo* certificate may drain a
# silo, and this uses the host's own (SILO_TLS_CERT, SILO_TLS_KEY, SILO_TLS_CA).
#
#   1. `silo drain HOST:PORT --wait`: the silo refuses new Work (routers send the batch to the
#      key's next owner at once), writes ShuttingDown (every router that sees it moves the silo's
#      keys), lets the Work calls in flight finish, writes Dead and exits; the command returns
#      once its port no longer answers (at most SILO_DRAIN_WAIT).
#   2. Spark's own decommission of the worker: SPARK_DECOMMISSION_COMMAND, by default
#      $SPARK_HOME/sbin/decommission-worker.sh (it sends the worker SIGPWR; the worker stops
#      taking executors, and its executors finish their tasks and migrate their blocks).
#
# The worker is decommissioned even if the drain failed (the host is going away either way):
# the script then exits 1. The silo does not come back by itself (a drained silo exits 0, and
# silo-sidecar.service restarts only on failure): `systemctl start silo-sidecar` on a host
# taken back into service.
#
# Settings (environment): SILO_ENV_FILE (default /etc/silo/sidecar.env: SILO_HOST, SILO_PORT or
# SILO_ADVERTISE_HOST/PORT, SILO_CLUSTER, SILO_TLS_*), SILO_BIN (default /opt/silo/venv/bin/silo),
# SILO_DRAIN_WAIT (default 30s: above the silo's SILO_SHUTDOWN_GRACE), SPARK_DECOMMISSION_COMMAND.
set -eu

. "${SILO_ENV_FILE:-/etc/silo/sidecar.env}"
silo_bin=${SILO_BIN:-/opt/silo/venv/bin/silo}
address="${SILO_ADVERTISE_HOST:-${SILO_HOST:?SILO_HOST is not set in the env file}}:${SILO_ADVERTISE_PORT:-${SILO_PORT:-11111}}"

if [ -n "${SILO_TLS_CERT:-}" ]; then
    set -- --tls-cert "$SILO_TLS_CERT" --tls-key "${SILO_TLS_KEY:?SILO_TLS_KEY is not set}" \
        --tls-ca "${SILO_TLS_CA:?SILO_TLS_CA is not set}"
else
    set -- --insecure
fi

drained=0
if "$silo_bin" drain "$address" --cluster "${SILO_CLUSTER:?SILO_CLUSTER is not set}" \
    --wait "${SILO_DRAIN_WAIT:-30s}" "$@"; then
    drained=1
else
    echo "decommission-worker: the silo at $address did not drain; decommissioning the Spark worker anyway" >&2
fi

spark_step=${SPARK_DECOMMISSION_COMMAND:-"${SPARK_HOME:?set SPARK_HOME or SPARK_DECOMMISSION_COMMAND}/sbin/decommission-worker.sh"}
echo "decommission-worker: $spark_step"
sh -c "$spark_step"

[ "$drained" = 1 ]
