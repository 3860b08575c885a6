"""The old import path of the work client; it lives in ``silo.work.client``."""

from silo.work.client import SyncWorkClient, WorkClient, WorkError, WorkUnavailableError

__all__ = ["SyncWorkClient", "WorkClient", "WorkError", "WorkUnavailableError"]
