"""The SPIN model of the failure detector (``spin_model/membership.pml``), checked by the suite.

See ``spin_model/spin_check.py`` for the runner and ``docs/protocol.md``, "The model", for what it proves.
"""
