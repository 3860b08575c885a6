# Append to $SPARK_HOME/conf/spark-env.sh on each Spark worker host (standalone). A worker passes
# its environment to the executors it launches, so they know which silo is their sidecar.
# Optional: without it an executor finds the silo whose spark.host is its host name (the unit runs
# the silo with --property spark.host=%H), which is also how YARN executors find theirs.
# Must equal the sidecar's advertised host:port (SILO_HOST:SILO_PORT in /etc/silo/sidecar.env).
. /etc/silo/sidecar.env
export SILO_SIDECAR_ADDRESS="${SILO_HOST}:${SILO_PORT}"
