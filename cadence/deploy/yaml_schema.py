"""Read a YAML document into frozen dataclasses; reject what does not fit, naming the line.

    config = load(Path("deploy.yaml"), DeployFile)

PyYAML composes the document into nodes that remember where they start; each node is checked
against the type annotation of the dataclass field it fills, so an error can say
`deploy.yaml:7: engine.max_streams: expected an integer or null, got 'many'` or list the allowed values of a
`Literal`. Supported annotations: nested dataclasses, int, float, bool, str, Literal[...], list[X],
dict[str, X], unions of those (X | None, int | list[X]). A field's `metadata` may hold
`min` (lowest number allowed) and `check` (a callable that raises ValueError naming what is allowed).
A dataclass's own `__post_init__` ValueError is reported at the line of its mapping.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

T = TypeVar("T")

_INT, _FLOAT, _BOOL, _NULL, _STR = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null", "str"))


class SchemaError(ValueError):
    """A document that does not fit its schema: where (file, line, dotted key) and why."""

    def __init__(self, source: str, line: int | None, key: str, message: str):
        self.source, self.line, self.key, self.message = source, line, key, message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


def load(path: Path, schema: type[T]) -> T:
    """The file at `path` as a `schema` instance. Raises SchemaError (and OSError if unreadable)."""
    return parse(Path(path).read_text(encoding="utf-8"), schema, str(path))


def parse(text: str, schema: type[T], source: str = "<string>") -> T:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise SchemaError(source, mark.line + 1 if mark else None, "", f"invalid YAML: {e.problem or e}") from None
    if root is None:  # an empty file: every default
        return schema()
    return _Walker(source).value(root, schema, "")


class _Walker:
    def __init__(self, source: str):
        self.source = source
        self.constructor = SafeConstructor()

    def error(self, node: Node, key: str, message: str) -> SchemaError:
        return SchemaError(self.source, node.start_mark.line + 1, key, message)

    def value(self, node: Node, annotation: Any, key: str) -> Any:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            return self.union(node, typing.get_args(annotation), key)
        if dataclasses.is_dataclass(annotation):
            return self.dataclass(node, annotation, key)
        if origin is Literal:
            return self.literal(node, typing.get_args(annotation), key)
        if origin is list:
            if not isinstance(node, SequenceNode):
                raise self.error(node, key, f"expected a list, got {self.describe(node)}")
            (item,) = typing.get_args(annotation)
            return [self.value(n, item, f"{key}[{i}]") for i, n in enumerate(node.value)]
        if origin is dict:
            _, item = typing.get_args(annotation)
            pairs = self.mapping(node, key)
            return {k: self.value(v, item, f"{key}.{k}") for k, (_, v) in pairs.items()}
        return self.scalar(node, annotation, key)

    def union(self, node: Node, options: tuple[Any, ...], key: str) -> Any:
        if type(None) in options and isinstance(node, ScalarNode) and node.tag == _NULL:
            return None
        rest = [o for o in options if o is not type(None)]
        # Pick the member by the node's shape: a list, a mapping, or a scalar.
        for option in rest:
            origin = typing.get_origin(option)
            if isinstance(node, SequenceNode) and origin is list:
                return self.value(node, option, key)
            if isinstance(node, MappingNode) and (origin is dict or dataclasses.is_dataclass(option)):
                return self.value(node, option, key)
        scalars = [o for o in rest if typing.get_origin(o) not in (list, dict) and not dataclasses.is_dataclass(o)]
        for option in scalars:
            try:
                return self.value(node, option, key)
            except SchemaError:
                continue
        expected = " or ".join(self.name(o) for o in options)
        raise self.error(node, key, f"expected {expected}, got {self.describe(node)}")

    def dataclass(self, node: Node, cls: type, key: str) -> Any:
        pairs = self.mapping(node, key, cls)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        kwargs = {}
        for name, (key_node, value_node) in pairs.items():
            sub = f"{key}.{name}" if key else name
            if name in getattr(cls, "moved_keys", {}):
                raise self.error(key_node, sub, f"this key is now {key}.{cls.moved_keys[name]}")
            if name not in fields:
                raise self.error(key_node, key or "(top level)", f"unknown key '{name}'; allowed: {', '.join(fields)}")
            value = self.value(value_node, hints[name], sub)
            self.check(value_node, fields[name], value, sub)
            kwargs[name] = value
        try:
            return cls(**kwargs)
        except ValueError as e:  # the dataclass's own consistency checks
            raise self.error(node, key or "(top level)", str(e)) from None

    def mapping(self, node: Node, key: str, cls: type | None = None) -> dict[str, tuple[Node, Node]]:
        if not isinstance(node, MappingNode):
            allowed = f" (keys: {', '.join(f.name for f in dataclasses.fields(cls))})" if cls else ""
            raise self.error(node, key or "(top level)", f"expected a mapping{allowed}, got {self.describe(node)}")
        out: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            name = self.constructor.construct_object(key_node)
            if not isinstance(name, str):
                raise self.error(key_node, key or "(top level)", f"keys must be strings, got {name!r}")
            if name in out:
                first = out[name][0].start_mark.line + 1
                raise self.error(key_node, key or "(top level)", f"duplicate key '{name}' (first at line {first})")
            out[name] = (key_node, value_node)
        return out

    def literal(self, node: Node, allowed: tuple[Any, ...], key: str) -> Any:
        value = self.constructor.construct_object(node) if isinstance(node, ScalarNode) else None
        if not any(value == a and type(value) is type(a) for a in allowed):  # True == 1, but not here
            shown = ", ".join(str(a) for a in allowed)
            raise self.error(node, key, f"{self.describe(node)} is not allowed; allowed: {shown}")
        return value

    def scalar(self, node: Node, kind: type, key: str) -> Any:
        accepted = {int: (_INT,), float: (_INT, _FLOAT), bool: (_BOOL,), str: (_STR,)}
        if kind not in accepted:
            raise TypeError(f"yaml_schema does not support the annotation {kind!r}")
        if not isinstance(node, ScalarNode) or node.tag not in accepted[kind]:
            raise self.error(node, key, f"expected {self.name(kind)}, got {self.describe(node)}")
        value = self.constructor.construct_object(node)
        return float(value) if kind is float else value

    def check(self, node: Node, field: dataclasses.Field, value: Any, key: str) -> None:
        if value is None:
            return
        low = field.metadata.get("min")
        values = value if isinstance(value, list) else [value]
        if low is not None and any(isinstance(v, (int, float)) and v < low for v in values):
            raise self.error(node, key, f"must be >= {low}, got {value}")
        if (check := field.metadata.get("check")) is not None:
            try:
                check(value)
            except ValueError as e:
                raise self.error(node, key, str(e)) from None

    @staticmethod
    def describe(node: Node) -> str:
        if isinstance(node, MappingNode):
            return "a mapping"
        if isinstance(node, SequenceNode):
            return "a list"
        return "null" if node.tag == _NULL else repr(node.value)

    @staticmethod
    def name(annotation: Any) -> str:
        if annotation is type(None):
            return "null"
        if typing.get_origin(annotation) is list:
            return "a list"
        if typing.get_origin(annotation) is dict or dataclasses.is_dataclass(annotation):
            return "a mapping"
        if typing.get_origin(annotation) is Literal:
            return "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
        names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
        return names.get(annotation, str(annotation))
