# Append to $SPARK_HOME/conf/spark-env.sh on each Spark worker host. A worker passes its
# environment to the executors it launches, so they know which silo is their sidecar.
# Must equal the sidecar's advertised host:port (SILO_HOST:SILO_PORT in /etc/silo/sidecar.env).
. /etc/silo/sidecar.env
export SILO_SIDECAR_ADDRESS="${SILO_HOST}:${SILO_PORT}"
