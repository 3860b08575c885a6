"""The test bench: the tools the tests and the benchmarks share.

* ``testbed.services``: throwaway real servers (PostgreSQL, MariaDB, ZooKeeper, DynamoDB through
  moto, the Consul-compatible server, Spark standalone), each started in a temporary directory on
  a free port, with the pytest fixtures that start them once per test session.
* ``testbed.pytest_signals``: a pytest plugin that makes SIGTERM and SIGHUP end a run as Ctrl-C
  does, so that the fixtures' teardown stops every server the run started.
* ``testbed.consul_server``: a Consul-HTTP-compatible KV server (``python -m testbed.consul_server``).
* ``testbed.netfaults``: hosts in network namespaces on a virtual LAN, cut or thinned with iptables.
* ``testbed.cluster_harness`` and ``testbed.net_cluster``: real ``silo run`` processes on loopback
  or one per namespace, with the checks every cluster test runs on their history.
* ``testbed.scrape``: reading a silo's Prometheus endpoint.

It imports the product (``silo``, ``membership_tables``) and never the tests or the benchmarks
(``tests/test_layout.py`` checks it).
"""
