"""Real ``silo run`` clusters under network faults: each silo on its own host of a ``NetworkLab``.

See ``testbed/net_cluster.py`` for the harness and ``test_network_faults.py`` for the scenarios.
"""
