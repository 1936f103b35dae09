"""Read template.yaml (with its CloudFormation short tags) into what the runtime needs.

Only the intrinsic functions the template uses for names and environment are resolved: `!Ref`
of parameters and resources, `!GetAtt X.Arn|QueueName|TopicName|QueueUrl`, and `!Sub` with
`${Name}` / `${Name.Attr}` / `${AWS::Region}` references.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACCOUNT = "123456789012"


class TemplateError(ValueError):
    """The template lacks something the local runtime needs."""


class TemplateNotFound(TemplateError):
    """No iotsched template at the given path, or none found from the working directory up."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that turns CloudFormation short tags into their long (JSON) form."""


def _long_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        return {"Fn::GetAtt": [resource, attribute]}
    return {f"Fn::{suffix}": value}


_Loader.add_multi_constructor("!", _long_form)


#: Logical ids the local runtime needs: a template without them is not iotsched's.
IOTSCHED_RESOURCES = ("Table", "ShardQueue", "WorkerFunction", "DispatcherFunction")

#: The names in template.yaml the runtime drives: schedule events and queues.
TICK_EVENT = "Tick"  # the tick's rule
SWEEP_EVENT = "Sweep"  # the sweeper's rule
SHARD_QUEUE = "ShardQueue"
#: The shard queues of high and low priority work (normal work is SHARD_QUEUE's).
LANE_QUEUES = ("ShardHighQueue", "ShardLowQueue")
DISPATCH_QUEUE = "DispatchQueue"  # the fanned-out tick's messages, one per bucket


def is_iotsched(data: Mapping[str, Any]) -> bool:
    """Whether a loaded template is iotsched's own (it holds the scheduler's resources)."""
    resources = data.get("Resources") or {}
    return all(name in resources for name in IOTSCHED_RESOURCES)


def iotsched_template(path: Path) -> Path | None:
    """The iotsched template that `path` deploys: `path` itself if it is iotsched's, else the
    one it nests as an `AWS::Serverless::Application` with a local Location (a project made
    by `iotsched init`), else None."""
    try:
        data = load(path)
    except (TemplateError, yaml.YAMLError, OSError):
        return None
    if is_iotsched(data):
        return path
    for resource in data["Resources"].values():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::Serverless::Application":
            continue
        location = (resource.get("Properties") or {}).get("Location")
        if isinstance(location, str) and "://" not in location:
            nested = (path.parent / location).resolve()
            if nested.is_file() and nested != path.resolve() and _loads_as_iotsched(nested):
                return nested
    return None


def _loads_as_iotsched(path: Path) -> bool:
    try:
        return is_iotsched(load(path))
    except (TemplateError, yaml.YAMLError, OSError):
        return False


def load(path: Path) -> dict[str, Any]:
    """Parse a SAM/CloudFormation template; short tags become their long form (`Fn::...`)."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(data, dict) or "Resources" not in data:
        raise TemplateError(f"{path} is not a CloudFormation template")
    return data


@dataclass
class Function:
    """A function of the template, as the runtime runs it."""

    logical_id: str
    code_dir: Path
    handler: str
    timeout_s: int
    environment: dict[str, str]
    schedules: dict[str, str] = field(default_factory=dict)  # event name -> expression
    sqs_sources: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Template:
    """The template with parameters bound; resolves names once physical ids are known."""

    path: Path
    data: dict[str, Any]
    parameters: dict[str, str]

    @classmethod
    def read(cls, path: Path, overrides: Mapping[str, str] | None = None) -> Template:
        """Load `path` and bind parameter defaults plus `overrides`."""
        data = load(path)
        params: dict[str, str] = {}
        for name, spec in (data.get("Parameters") or {}).items():
            if "Default" in spec:
                params[name] = str(spec["Default"])
        for name, value in (overrides or {}).items():
            if name not in params and name not in (data.get("Parameters") or {}):
                raise TemplateError(f"unknown template parameter {name!r}")
            params[name] = str(value)
        return cls(path=path, data=data, parameters=params)

    @property
    def root(self) -> Path:
        """The directory CodeUri paths are relative to."""
        return self.path.parent

    def resources(self, type_name: str) -> dict[str, dict[str, Any]]:
        """Resources of one CloudFormation type, by logical id."""
        return {
            lid: res for lid, res in self.data["Resources"].items() if res.get("Type") == type_name
        }

    def resolve(self, value: Any, physical: Callable[[str, str | None], str]) -> Any:
        """Resolve intrinsics in `value`; `physical(logical_id, attribute)` names resources."""
        if isinstance(value, dict):
            if len(value) == 1:
                ((key, inner),) = value.items()
                if key == "Ref":
                    return self._intrinsic("Ref", inner, physical)
                if key.startswith("Fn::"):
                    return self._intrinsic(key[4:], inner, physical)
            return {k: self.resolve(v, physical) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, physical) for v in value]
        return value

    def _intrinsic(self, name: str, arg: Any, physical: Callable[[str, str | None], str]) -> Any:
        if name == "Ref":
            if arg in self.parameters:
                return self.parameters[arg]
            if arg == "AWS::Region":
                return "us-east-1"
            if arg == "AWS::AccountId":
                return ACCOUNT
            if arg == "AWS::Partition":
                return "aws"
            if arg == "AWS::StackName":
                return "iotsched"
            return physical(str(arg), None)
        if name == "GetAtt":
            target, attr = arg if isinstance(arg, list) else str(arg).split(".", 1)
            return physical(str(target), str(attr))
        if name == "Sub":
            text = arg if isinstance(arg, str) else arg[0]
            return re.sub(
                r"\$\{([^}]+)\}",
                lambda m: str(self._sub_ref(m.group(1), physical)),
                text,
            )
        if name == "If":
            return None
        raise TemplateError(f"the local runtime cannot resolve !{name}")

    def _sub_ref(self, ref: str, physical: Callable[[str, str | None], str]) -> Any:
        if "." in ref and not ref.startswith("AWS::"):
            target, attr = ref.split(".", 1)
            return physical(target, attr)
        return self._intrinsic("Ref", ref, physical)

    def functions(self, physical: Callable[[str, str | None], str]) -> dict[str, Function]:
        """Every AWS::Serverless::Function with Globals merged and intrinsics resolved."""
        globals_ = (self.data.get("Globals") or {}).get("Function") or {}
        out: dict[str, Function] = {}
        for lid, res in self.resources("AWS::Serverless::Function").items():
            props = res.get("Properties") or {}
            env = dict((globals_.get("Environment") or {}).get("Variables") or {})
            env.update((props.get("Environment") or {}).get("Variables") or {})
            resolved_env = {k: str(self.resolve(v, physical)) for k, v in env.items()}
            timeout = self.resolve(props.get("Timeout", globals_.get("Timeout", 3)), physical)
            fn = Function(
                logical_id=lid,
                code_dir=self.root / str(props["CodeUri"]),
                handler=str(props.get("Handler", globals_.get("Handler", "app.lambda_handler"))),
                timeout_s=int(timeout),
                environment=resolved_env,
            )
            for event_name, event in (props.get("Events") or {}).items():
                eprops = event.get("Properties") or {}
                if event.get("Type") == "Schedule":
                    fn.schedules[str(event_name)] = str(eprops.get("Schedule"))
                elif event.get("Type") == "SQS":
                    fn.sqs_sources.append(
                        {
                            "queue": self.resolve(eprops["Queue"], physical),
                            "batch_size": int(self.resolve(eprops.get("BatchSize", 10), physical)),
                            "report_batch_item_failures": "ReportBatchItemFailures"
                            in (eprops.get("FunctionResponseTypes") or []),
                        }
                    )
            out[lid] = fn
        return out


def find_template(explicit: Path | None) -> Path:
    """iotsched's template.yaml: the given path, or the nearest template.yaml from the working
    directory up; either may be a project's template that nests iotsched's (`iotsched init`),
    whose nested template is then the one run. Raises TemplateNotFound."""
    if explicit is not None:
        if not explicit.is_file():
            raise TemplateNotFound(f"{explicit}: no such template")
        return _iotsched_or_nested(explicit)
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        candidate = directory / "template.yaml"
        if candidate.is_file():
            return _iotsched_or_nested(candidate)
    raise TemplateNotFound(
        "template.yaml not found here or above; run from the repository or pass --template"
    )


def _iotsched_or_nested(path: Path) -> Path:
    found = iotsched_template(path)
    if found is None:
        raise TemplateNotFound(
            f"{path} is not iotsched's template and nests none (an AWS::Serverless::Application "
            "whose Location is iotsched's template.yaml): pass --template"
        )
    return found
