"""Who is calling the management API, and which tenants they may see: the `Caller`.

API Gateway checks the caller's SigV4 signature (`AWS_IAM`) and puts the principal it vouches
for in the request context (`requestContext.identity.userArn`); a header cannot change it. The
principal's IAM tags say what it holds: `iotsched:tenants` (tenant names separated by blanks:
`tenant_names`) or `iotsched:operator` = `true` (every tenant, and tasks without one). A principal with neither
holds nothing, and every route answers it 403.

The local runtime's port serves the app as the operator (`local_identity`, which a header may
narrow to tenants), the tests `as_operator` (design.md, section 13).
"""

from __future__ import annotations

import enum
import functools
import getpass
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from iotsched.core.value_types import is_tenant_name

#: The IAM tags the API reads on the calling role or user.
TENANTS_TAG = "iotsched:tenants"
OPERATOR_TAG = "iotsched:operator"
#: How long a principal's tags are trusted before they are read again.
TAGS_TTL_S = 60.0


class AllTenants(enum.Enum):
    """Every tenant, and tasks with no tenant: what an operator holds."""

    ALL = "*"


ALL = AllTenants.ALL

Tenants = frozenset[str] | Literal[AllTenants.ALL]


@dataclass(frozen=True)
class Caller:
    """The principal behind a request and the tenants it holds (`ALL` for an operator)."""

    principal: str
    tenants: Tenants

    @property
    def operator(self) -> bool:
        return self.tenants is ALL

    def sees(self, tenant: str | None) -> bool:
        """Whether records of `tenant` are visible to this caller (no tenant: operators only)."""
        if self.tenants is ALL:
            return True
        return tenant is not None and tenant in self.tenants

    def tenant_list(self) -> list[str] | None:
        """The tenants held, sorted; None for an operator."""
        return None if self.tenants is ALL else sorted(self.tenants)


@functools.cache
def local_principal() -> str:
    """Who acts on an emulator, which checks no identity: the user running it, `local:<user>`,
    as the CLI names them there too, so that one person's changes carry one actor whichever
    way they came (the CLI, the local port's API or console)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no password entry for the process's uid
        user = "unknown"
    return f"local:{user}"


def local_operator() -> Caller:
    """The caller the local runtime and the tests act as unless told otherwise."""
    return Caller(principal=local_principal(), tenants=ALL)


def tenant_names(text: str) -> frozenset[str]:
    """The tenants a blank-separated list names (the `iotsched:tenants` tag, the local tenants
    header). A word that is not a tenant name (`TENANT_PATTERN`) names no tenant's records and
    grants nothing."""
    return frozenset(word for word in text.split() if is_tenant_name(word))


#: How the app learns the caller of a request from its REST proxy event.
Identify = Callable[[Mapping[str, Any]], Caller]


def as_operator(event: Mapping[str, Any]) -> Caller:
    """Every request is the operator's: the local port and tests (never the Lambda)."""
    return local_operator()


#: The header the local runtime's port (only) reads to act as a tenant caller.
LOCAL_TENANTS_HEADER = "X-Iotsched-Local-Tenants"


def local_identity(event: Mapping[str, Any]) -> Caller:
    """The local port's caller: the operator, or the tenants (blank-separated) a request names
    in `LOCAL_TENANTS_HEADER`, to see the API and the console as a tenant would. Nothing the
    Lambda serves reads this header."""
    headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
    named = headers.get(LOCAL_TENANTS_HEADER.lower())
    if named is None:
        return local_operator()
    return Caller(principal=local_principal(), tenants=tenant_names(str(named)))


class PrincipalTagReader(Protocol):
    """Reads the tags of an IAM role or user of the API's own account."""

    def role_tags(self, role_name: str) -> Mapping[str, str] | None: ...

    def user_tags(self, user_name: str) -> Mapping[str, str] | None: ...


def principal_arn(event: Mapping[str, Any]) -> str | None:
    """The principal API Gateway vouches for (None when the request was not IAM-signed)."""
    context = event.get("requestContext") or {}
    identity = context.get("identity") or {}
    arn = identity.get("userArn")
    return arn if isinstance(arn, str) and arn else None


def tenants_from_tags(tags: Mapping[str, str] | None) -> Tenants:
    """What the tags grant: `ALL` for an operator, else the tenants named (maybe none)."""
    if not tags:
        return frozenset()
    if tags.get(OPERATOR_TAG, "").strip().lower() == "true":
        return ALL
    return tenant_names(tags.get(TENANTS_TAG, ""))


def _tag_source(arn: str, account: str | None) -> tuple[Literal["role", "user"], str] | None:
    """The role or user whose tags describe `arn`, if it is one of the API's account.

    An assumed role's session (`arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`) is its role; an
    IAM user (`arn:aws:iam::ACCOUNT:user/PATH/NAME`) is itself. Any other principal (the root
    user, a federated user) or another account's (whose names could collide with ours) is
    nobody's.
    """
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or account is None or parts[4] != account:
        return None
    service, resource = parts[2], parts[5]
    if service == "sts" and resource.startswith("assumed-role/"):
        role = resource.split("/")[1:2]
        return ("role", role[0]) if role and role[0] else None
    if service == "iam" and resource.startswith("user/"):
        name = resource.rsplit("/", 1)[-1]
        return ("user", name) if name else None
    return None


class IamIdentity:
    """Maps the signed caller to its tenants through its IAM tags, cached `TAGS_TTL_S`."""

    def __init__(
        self,
        reader: PrincipalTagReader,
        *,
        monotonic: Callable[[], float],
        ttl_s: float = TAGS_TTL_S,
    ) -> None:
        self._reader = reader
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, Tenants]] = {}

    def __call__(self, event: Mapping[str, Any]) -> Caller:
        arn = principal_arn(event)
        if arn is None:
            return Caller(principal="anonymous", tenants=frozenset())
        context = event.get("requestContext") or {}
        account = context.get("accountId")
        source = _tag_source(arn, account if isinstance(account, str) else None)
        if source is None:
            return Caller(principal=arn, tenants=frozenset())
        return Caller(principal=arn, tenants=self._tenants(source))

    def _tenants(self, source: tuple[Literal["role", "user"], str]) -> Tenants:
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(source)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        kind, name = source
        tags = self._reader.role_tags(name) if kind == "role" else self._reader.user_tags(name)
        tenants = tenants_from_tags(tags)
        with self._lock:
            self._cache[source] = (now, tenants)
        return tenants


class ForbiddenError(Exception):
    """The caller may not do this (a tenant it does not hold); the message says what."""
