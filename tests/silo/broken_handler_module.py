"""A module whose import fails, for handler-spec tests."""

raise ImportError("this module is broken on purpose")
