"""The caller mapping: which principal API Gateway vouches for, and what its IAM tags grant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
import pytest
from moto import mock_aws

from iotsched.adapters.iam import IamTags
from iotsched.api.identity import (
    ALL,
    Caller,
    IamIdentity,
    local_identity,
    local_operator,
    tenants_from_tags,
)
from iotsched.api.proxy import rest_event

ACCOUNT = "123456789012"


class Tags:
    def __init__(self, roles: Mapping[str, Mapping[str, str]], users: Any = None) -> None:
        self.roles = dict(roles)
        self.users = dict(users or {})
        self.reads: list[str] = []

    def role_tags(self, role_name: str) -> Mapping[str, str] | None:
        self.reads.append(f"role/{role_name}")
        return self.roles.get(role_name)

    def user_tags(self, user_name: str) -> Mapping[str, str] | None:
        self.reads.append(f"user/{user_name}")
        return self.users.get(user_name)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(arn: str | None, headers: dict[str, str] | None = None) -> dict[str, Any]:
    made = rest_event("GET", "/tasks", headers=headers)
    made["requestContext"]["identity"]["userArn"] = arn
    return made


def test_tags_grant_tenants_or_everything() -> None:
    assert tenants_from_tags({"iotsched:tenants": " acme  globex "}) == {"acme", "globex"}
    assert tenants_from_tags({"iotsched:operator": "true", "iotsched:tenants": "acme"}) is ALL
    assert tenants_from_tags({"iotsched:operator": "TRUE"}) is ALL
    assert tenants_from_tags({"iotsched:operator": "false"}) == frozenset()
    assert tenants_from_tags({"iotsched:tenants": ""}) == frozenset()
    assert tenants_from_tags({}) == frozenset()
    assert tenants_from_tags(None) == frozenset()


def test_a_role_session_and_a_user_map_through_their_tags() -> None:
    tags = Tags({"acme-ops": {"iotsched:tenants": "acme"}}, {"ops": {"iotsched:operator": "true"}})
    identify = IamIdentity(tags, monotonic=Clock())
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/acme-ops/alice"
    assert identify(event(session)) == Caller(session, frozenset({"acme"}))
    user = f"arn:aws:iam::{ACCOUNT}:user/team/ops"
    caller = identify(event(user))
    assert caller.operator and caller.sees(None) and caller.principal == user
    assert tags.reads == ["role/acme-ops", "user/ops"]


@pytest.mark.parametrize(
    "arn",
    [
        None,  # not signed (only the local port serves such requests)
        "",
        "arn:aws:sts::999999999999:assumed-role/acme-ops/mallory",  # same name, other account
        f"arn:aws:iam::{ACCOUNT}:root",
        f"arn:aws:sts::{ACCOUNT}:federated-user/bob",
        f"arn:aws:sts::{ACCOUNT}:assumed-role/no-such-role/x",
        "not an arn",
    ],
)
def test_other_principals_hold_nothing(arn: str | None) -> None:
    tags = Tags({"acme-ops": {"iotsched:tenants": "acme"}})
    caller = IamIdentity(tags, monotonic=Clock())(event(arn))
    assert caller.tenants == frozenset() and not caller.operator
    assert not caller.sees("acme") and not caller.sees(None)


def test_headers_never_name_the_caller() -> None:
    tags = Tags({"globex-ops": {"iotsched:tenants": "globex"}})
    identify = IamIdentity(tags, monotonic=Clock())
    forged = {"X-Iotsched-Tenants": "acme", "X-Iotsched-Operator": "true", "X-User-Arn": "x"}
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/globex-ops/s"
    assert identify(event(session, forged)).tenants == {"globex"}
    assert identify(event(None, forged)).tenants == frozenset()


def test_tags_are_cached_for_a_minute() -> None:
    tags = Tags({"acme-ops": {"iotsched:tenants": "acme"}})
    clock = Clock()
    identify = IamIdentity(tags, monotonic=clock, ttl_s=60)
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/acme-ops/s"
    assert identify(event(session)).tenants == {"acme"}
    tags.roles["acme-ops"] = {"iotsched:tenants": "acme globex"}
    clock.now = 59.0
    assert identify(event(session)).tenants == {"acme"}
    clock.now = 60.0
    assert identify(event(session)).tenants == {"acme", "globex"}
    assert tags.reads == ["role/acme-ops", "role/acme-ops"]


def test_iam_tags_on_moto() -> None:
    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        trust = '{"Version":"2012-10-17","Statement":[]}'
        iam.create_role(
            RoleName="acme-ops",
            AssumeRolePolicyDocument=trust,
            Tags=[{"Key": "iotsched:tenants", "Value": "acme globex"}],
        )
        iam.create_user(UserName="ops", Tags=[{"Key": "iotsched:operator", "Value": "true"}])
        reader = IamTags(iam)
        assert reader.role_tags("acme-ops") == {"iotsched:tenants": "acme globex"}
        assert reader.user_tags("ops") == {"iotsched:operator": "true"}
        assert reader.role_tags("missing") is None
        assert reader.user_tags("missing") is None


def test_the_local_port_is_the_operator_unless_a_header_names_tenants() -> None:
    assert local_identity(event(None)) == local_operator()
    as_tenants = local_identity(event(None, {"X-Iotsched-Local-Tenants": "acme globex"}))
    assert as_tenants.tenants == {"acme", "globex"} and not as_tenants.operator
    assert local_identity(event(None, {"x-iotsched-local-tenants": ""})).tenants == frozenset()


def test_one_person_is_one_actor_on_the_cli_and_the_local_port() -> None:
    # The history of an emulator names who changed what the same way whichever way the
    # change came: the CLI's actor and the local port's principal (operator or tenants).
    import click

    from iotsched.cli.output import actor

    class Emulated:
        emulated = True

    with click.Context(click.Command("x"), obj={"target": Emulated()}) as ctx:
        cli_actor = actor(ctx)
    assert cli_actor.startswith("local:") and len(cli_actor) > len("local:")
    assert local_identity(event(None)).principal == cli_actor
    as_tenant = local_identity(event(None, {"X-Iotsched-Local-Tenants": "acme"}))
    assert as_tenant.principal == cli_actor
