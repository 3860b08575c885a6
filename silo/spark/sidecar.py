"""How an executor finds its host's sidecar silo: named in its environment, or by host.

``SILO_SIDECAR_ADDRESS=host:port`` names the sidecar (a Kubernetes pod template, a worker's
``spark-env.sh``). Without it the executor looks for the Active silo that advertises its host
(``silo.work.sidecar``: the ``spark.host`` property, else the advertised address), knowing its
host by every name Spark's cluster managers put in an executor's environment:

- ``SILO_SIDECAR_HOST``: names given explicitly, comma-separated (e.g. the Kubernetes node name
  from the downward API, for a DaemonSet silo with ``spark.host`` = the node name);
- ``NM_HOST``: the NodeManager host of a YARN container;
- ``SPARK_LOCAL_HOSTNAME`` and ``SPARK_LOCAL_IP``: a standalone worker's ``spark-env.sh``;
- ``SPARK_EXECUTOR_POD_IP``: a Kubernetes executor pod's address;
- the host name (``socket.gethostname()``);

and any address assigned to one of its interfaces. So YARN, standalone and Kubernetes executors
need no per-host setting: one silo per host started with ``--property spark.host=<host name>``
(the systemd unit does) is found by the executors on that host.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping

from silo.work.sidecar import SidecarLocator, is_local_address

SIDECAR_ENV = "SILO_SIDECAR_ADDRESS"
"""Executor environment variable: the local sidecar silo's advertised ``host:port``."""

SIDECAR_HOST_ENV = "SILO_SIDECAR_HOST"
"""Executor environment variable: names of this executor's host (comma-separated) to match silos by."""

HOST_NAME_ENV = (SIDECAR_HOST_ENV, "NM_HOST", "SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP", "SPARK_EXECUTOR_POD_IP")
"""The environment variables an executor's host names come from, besides ``socket.gethostname()``."""


def executor_sidecar(
    environ: Mapping[str, str] | None = None,
    hostname: Callable[[], str] = socket.gethostname,
    local_address: Callable[[str], bool] = is_local_address,
) -> SidecarLocator:
    """This executor's ``SidecarLocator``: the ``SILO_SIDECAR_ADDRESS`` endpoint if set, else its host."""
    environ = os.environ if environ is None else environ
    endpoint = environ.get(SIDECAR_ENV, "").strip()
    if endpoint:
        return SidecarLocator.at(endpoint)
    names = [hostname()]
    for variable in HOST_NAME_ENV:
        names += environ.get(variable, "").split(",")
    return SidecarLocator.on_host(names, local_address)
