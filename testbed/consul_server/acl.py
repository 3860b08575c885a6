"""ACLs of the Consul test server: tokens, ``key_prefix`` policies, and Consul's answers to a denial.

Enforced the way an agent with ``acl { enabled = true, default_policy = "deny" }`` does for KV:

* a request without a token is the anonymous token, which may do nothing; an unknown token
  gets 403 ``ACL not found``;
* a single-key read or write the token's policy does not allow gets 403 ``Permission denied``;
  a recursive read (``recurse``/``keys``) silently leaves out the keys it may not read (404 if
  none is left); a recursive delete needs ``write`` on the whole prefix;
* a transaction with an operation the token may not run is rolled back: 409 with ``What:
  "Permission denied"`` for that operation, as Consul's ``Txn`` pre-check reports it.

Policies are parsed from the HCL an operator writes (only ``key_prefix "..." { policy = "..." }``
blocks), so tests can load the very policy the docs show. The most specific (longest) prefix
that matches a key decides; no match denies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PERMISSION_DENIED = "Permission denied"
ACL_NOT_FOUND = "ACL not found"

_POLICIES = ("deny", "read", "write")
_RULE = re.compile(r'key_prefix\s+"(?P<prefix>[^"]*)"\s*\{\s*policy\s*=\s*"(?P<policy>[a-z]+)"\s*\}')
READ_VERBS = frozenset({"get", "get-tree", "check-index", "check-not-exists", "check-session"})
"""Transaction verbs that only read; every other verb writes."""
TREE_VERBS = frozenset({"get-tree", "delete-tree"})


class PolicyError(ValueError):
    """HCL the test server cannot read, or a policy that is not deny/read/write."""


@dataclass(frozen=True)
class AclPolicy:
    """``key_prefix`` rules: prefix -> ``deny``, ``read`` or ``write``."""

    rules: tuple[tuple[str, str], ...]

    @classmethod
    def from_hcl(cls, text: str) -> AclPolicy:
        """The ``key_prefix`` blocks of an HCL policy; anything else in it is an error."""
        rules = [(match["prefix"], match["policy"]) for match in _RULE.finditer(text)]
        leftover = _RULE.sub("", text).strip()
        if leftover:
            raise PolicyError(f"the Consul test server reads only key_prefix blocks, not {leftover!r}")
        for prefix, policy in rules:
            if policy not in _POLICIES:
                raise PolicyError(f"key_prefix {prefix!r} has policy {policy!r}; use one of {_POLICIES}")
        return cls(tuple(rules))

    @classmethod
    def allow_all(cls) -> AclPolicy:
        return cls((("", "write"),))

    def _policy(self, key: str) -> str:
        matching = [(len(prefix), policy) for prefix, policy in self.rules if key.startswith(prefix)]
        return max(matching)[1] if matching else "deny"

    def may_read(self, key: str) -> bool:
        return self._policy(key) in ("read", "write")

    def may_write(self, key: str) -> bool:
        return self._policy(key) == "write"

    def may_write_tree(self, prefix: str) -> bool:
        """``write`` on ``prefix`` and on every more specific rule below it."""
        below = [policy for rule, policy in self.rules if rule.startswith(prefix) and len(rule) > len(prefix)]
        return self.may_write(prefix) and all(policy == "write" for policy in below)

    def may_run(self, verb: str, key: str) -> bool:
        """Whether a transaction operation passes Consul's pre-check."""
        if verb == "delete-tree":
            return self.may_write_tree(key)
        return self.may_read(key) if verb in READ_VERBS else self.may_write(key)


@dataclass(frozen=True)
class AclTable:
    """The tokens an agent knows and the policy of each; no token is the anonymous token."""

    tokens: Mapping[str, AclPolicy]
    anonymous: AclPolicy = AclPolicy(())

    @classmethod
    def single_token(cls, token: str) -> AclTable:
        """One token that may do everything (the server's ``acl_token`` shorthand)."""
        return cls({token: AclPolicy.allow_all()})

    def policy_of(self, token: str | None) -> AclPolicy | None:
        """The token's policy; ``None`` for a token the agent does not know (403 ACL not found)."""
        if not token:
            return self.anonymous
        return self.tokens.get(token)
