"""Declaring handlers and planners (public API, stable).

A handler is a plain function registered under a name:

    from pydantic import BaseModel
    from iotsched import ShardContext, handler

    class CloseParams(BaseModel):
        currency: str = "EUR"

    @handler("billing_close", params=CloseParams)
    def billing_close(ctx: ShardContext, params: CloseParams) -> dict[str, int]:
        ...

and listed in its package's `pyproject.toml`, under the entry-point group `iotsched.handlers`,
by the same name:

    [project.entry-points."iotsched.handlers"]
    billing_close = "acme_jobs.billing:billing_close"

The decorator changes nothing about the function (a unit test calls it directly); it attaches a
`HandlerSpec` the scheduler reads. Planners (custom sharding) are declared the same way with
`@planner`, under the group `iotsched.planners`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel

if TYPE_CHECKING:
    from iotsched.context import ShardContext

#: The entry-point groups a package lists its handlers and planners under (fixed names).
HANDLERS_GROUP = "iotsched.handlers"
PLANNERS_GROUP = "iotsched.planners"

_SPEC_ATTR = "__iotsched_handler__"
_PLANNER_ATTR = "__iotsched_planner__"
_PLANNER_PARAMS_ATTR = "__iotsched_planner_params__"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class HandlerSpec:
    """What `@handler` declares: the name, the function, the params model (or None: the
    function takes `ctx` only and reads `ctx.params`)."""

    name: str
    fn: Callable[..., Any]
    params: type[BaseModel] | None = None

    def parse_params(self, params: Mapping[str, Any]) -> BaseModel | None:
        """The params as the model (raises pydantic's ValidationError), or None without one."""
        return None if self.params is None else self.params.model_validate(dict(params))

    def call(self, ctx: ShardContext) -> Mapping[str, Any] | None:
        """Run the handler for `ctx`: with its params parsed by the model when it has one. A
        pydantic model returned is stored as its JSON form."""
        if self.params is None:
            result = self.fn(ctx)
        else:
            result = self.fn(ctx, self.parse_params(ctx.params))
        if isinstance(result, BaseModel):
            dumped: dict[str, Any] = result.model_dump(mode="json")
            return dumped
        return result  # type: ignore[no-any-return]

    def params_schema(self) -> dict[str, Any] | None:
        """The params' JSON Schema, or None for a handler without a params model."""
        return None if self.params is None else self.params.model_json_schema()


@overload
def handler(name: F, /) -> F: ...


@overload
def handler(
    name: str | None = None, /, *, params: type[BaseModel] | None = None
) -> Callable[[F], F]: ...


def handler(
    name: str | Callable[..., Any] | None = None,
    /,
    *,
    params: type[BaseModel] | None = None,
) -> Any:
    """Declare a handler: `@handler` (named after the function), `@handler("name")`, or
    `@handler("name", params=Model)` for a function `(ctx, params: Model)`.

    The name is what task files give as `handler:` (or `reduce:`) and must be the name of the
    function's entry point in the group `iotsched.handlers`.
    """
    if callable(name):
        fn = name
        setattr(fn, _SPEC_ATTR, HandlerSpec(name=fn.__name__, fn=fn))
        return fn

    def declare(fn: F) -> F:
        setattr(fn, _SPEC_ATTR, HandlerSpec(name=name or fn.__name__, fn=fn, params=params))
        return fn

    return declare


def spec_of(obj: Callable[..., Any], *, name: str | None = None) -> HandlerSpec:
    """The `HandlerSpec` of a decorated function; an undecorated `(ctx)` function gets one
    named `name` (or after the function)."""
    spec = getattr(obj, _SPEC_ATTR, None)
    if isinstance(spec, HandlerSpec):
        return spec
    return HandlerSpec(name=name or str(getattr(obj, "__name__", "handler")), fn=obj)


Planner = Callable[[Any], Sequence[Mapping[str, Any]]]
P = TypeVar("P", bound=Planner)


def planner(
    name: str | None = None, /, *, params: type[BaseModel] | None = None
) -> Callable[[P], P]:
    """Declare a custom planner `(sharding.params) -> [bounds, ...]` under `name` (or the
    function's), listed in the entry-point group `iotsched.planners` by that name. It runs
    when an instance is claimed (and at apply, to refuse a task it cannot plan) and its answer
    is stored with the instance, so it must be pure and quick: no I/O, no clock.

    `params=Model`: the planner takes its params as that model, validated before it is called,
    at apply and at the claim alike. Bound every parameter that sizes the plan (`le=`): a task
    whose params do not fit is refused at apply, naming the field and the bound, before the
    planner does any work.
    """

    def declare(fn: P) -> P:
        setattr(fn, _PLANNER_ATTR, name or getattr(fn, "__name__", "planner"))
        setattr(fn, _PLANNER_PARAMS_ATTR, params)
        return fn

    return declare
