"""The SPIN model of the failure detector (``protocol/membership.pml``), checked by the suite.

See ``protocol/spin_check.py`` for the runner and ``docs/protocol.md``, "The model", for what it proves.
"""
