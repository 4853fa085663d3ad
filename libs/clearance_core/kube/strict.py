"""Strict field checking, as ``kubectl --validate=strict``: one mechanism for every kind.

A field Clearance does not know — a typo (``priorty``), a wrong case (``matchname``), a
field of another kind — used to be ignored, so a policy with a typo was silently a
different policy (a Deny with a misspelled selector denied nothing). Now every object
Clearance reads is walked against the *shape* of its kind before it is compiled, and each
unknown field is a :class:`Problem` naming its JSON path and, when one is close, the field
that was probably meant. Any problem makes the object invalid
(:class:`~clearance_api.errors.UnknownFields`): it takes no effect at all, like any
other invalid object.

The shapes are OpenAPI v3 schemas reduced to their structure (:func:`structure`):

* ``properties``: the known fields of an object; any other is unknown, unless the object
  also has ``x-kubernetes-preserve-unknown-fields`` (the rest belongs to someone else);
* ``additionalProperties``: a map whose every value has that shape (its keys are names
  the author chooses: rule names, labels, field names);
* ``items``: every entry of a list has that shape;
* anything else (a scalar, ``metadata``, ``status``, a free-form object) is not checked.

For the kinds Clearance defines they come from the CRDs in ``deploy/crds`` (the single
source of truth: :mod:`clearance_core.kube.crd_shapes` is generated from them by
``clearance schemas``, and a test checks the two agree); for the kinds Kubernetes, OpenShift
and Open Cluster Management define, :mod:`clearance_core.kube.shapes` transcribes what
their schemas accept, for the parts Clearance reads. ``metadata`` may hold anything and
``status`` is never checked. Only field *names* are checked here: types, enums and values
remain each kind's compiler's to check, with the same paths.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import msgspec

from clearance_api.errors import UnknownFields

#: Problems named in one object's error (the rest are counted): a status stays readable.
MAX_PROBLEMS = 10
#: The keys of an OpenAPI schema that say what fields exist (everything else — types,
#: enums, defaults, descriptions — is left out of a shape).
STRUCTURE_KEYS = ("properties", "additionalProperties", "items",
                  "x-kubernetes-preserve-unknown-fields")


class Shape(msgspec.Struct, frozen=True, gc=False):
    """Which fields an object (or the values of a map, or the entries of a list) has.
    A Shape with none of its parts set accepts anything."""

    fields: Mapping[str, Shape] | None = None
    values: Shape | None = None
    items: Shape | None = None
    #: Fields beside ``fields`` are someone else's (preserve-unknown-fields).
    open: bool = False
    #: Whether there is anything to check in a value of this shape (derived: computed
    #: once, it is asked for every field of every object).
    checked: bool = False

    def __post_init__(self) -> None:
        if not self.checked and (self.fields is not None or self.values is not None
                                 or self.items is not None):
            msgspec.structs.force_setattr(self, "checked", True)


ANY = Shape()


class Problem(msgspec.Struct, frozen=True):
    """One unknown field: its JSON path and the known field it is closest to, if any."""

    path: str
    suggestion: str | None = None

    def __str__(self) -> str:
        hint = f' (did you mean "{self.suggestion}"?)' if self.suggestion else ""
        return f"{self.path}: unknown field{hint}"


def structure(schema: Any) -> dict[str, Any]:
    """An OpenAPI v3 schema reduced to the keys that say what fields exist (what
    :mod:`clearance_core.kube.crd_shapes` holds, and what :func:`from_openapi` reads)."""
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {str(name): structure(sub) for name, sub in properties.items()}
    # A map or a list whose values have no fields of their own accepts anything, as a
    # scalar does: left out.
    for key in ("additionalProperties", "items"):
        inner = structure(schema.get(key))
        if inner:
            out[key] = inner
    if schema.get("x-kubernetes-preserve-unknown-fields") is True and "properties" in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def object_structure(schema: Any) -> dict[str, Any]:
    """:func:`structure` of a whole object's schema, with ``metadata`` and ``status``
    accepting anything (Kubernetes owns the one; the other is never read)."""
    out = structure(schema)
    properties = out.setdefault("properties", {})
    for free in ("apiVersion", "kind", "metadata", "status"):
        properties[free] = {}
    return out


def from_openapi(schema: Mapping[str, Any]) -> Shape:
    """The :class:`Shape` of a (structure of an) OpenAPI v3 schema."""
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    items = schema.get("items")
    return Shape(
        fields=None if not isinstance(properties, dict) else
        {name: from_openapi(sub) for name, sub in properties.items()},
        values=from_openapi(additional) if isinstance(additional, dict) else None,
        items=from_openapi(items) if isinstance(items, dict) else None,
        open=schema.get("x-kubernetes-preserve-unknown-fields") is True,
    )


def suggestion(name: str, known: Mapping[str, Any]) -> str | None:
    """The known field ``name`` was probably meant as: the same but for case, else the
    closest by :mod:`difflib`'s ratio (None when nothing is close)."""
    folded = name.casefold()
    for candidate in known:
        if candidate.casefold() == folded:
            return candidate
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_fields(shape: Shape, value: Any, path: str,
                   suggest: int = MAX_PROBLEMS) -> list[Problem]:
    """Every unknown field of ``value`` (at ``path``) against ``shape``, in document
    order; the first ``suggest`` of them with a suggestion (each costs a comparison with
    every known field: a hostile object may hold a hundred thousand unknown fields). A
    value of another type than the shape expects (a list for an object, say) is not this
    function's concern: the kind's compiler reports it."""
    found: list[tuple[_Path, str, Mapping[str, Shape]]] = []
    _walk(shape, value, (None, path) if path else None, found)
    return [_problem(found[i], suggest=i < suggest) for i in range(len(found))]


def _problem(at: tuple[_Path, str, Mapping[str, Shape]], *, suggest: bool) -> Problem:
    parent, name, known = at
    return Problem(_text(parent, name), suggestion(name, known) if suggest else None)


#: Where a value sits: its parent's path and its key or index (None: the root). Made into
#: text only for a problem: a path per field was most of the check's cost.
_Path = tuple[Any, str | int] | None


def _text(parent: _Path, step: str | int) -> str:
    steps: list[str | int] = [step]
    while parent is not None:
        parent, up = parent
        steps.append(up)
    text = ""
    for part in reversed(steps):
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _walk(shape: Shape, value: Any, at: _Path,
          found: list[tuple[_Path, str, Mapping[str, Shape]]]) -> None:
    # Recursive, but never deeper than the shape (a dozen levels): a deeply nested value
    # is only walked as far as its kind has fields.
    if type(value) is dict:
        fields, values = shape.fields, shape.values
        if fields is None:
            if values is not None and values.checked:
                for key, item in value.items():
                    if item is not None:
                        _walk(values, item, (at, key), found)
            return
        for key, item in value.items():
            sub = fields.get(key)
            if sub is None:
                if values is not None:
                    sub = values
                elif shape.open:
                    continue
                else:
                    found.append((at, str(key), fields))
                    continue
            if item is not None and sub.checked:
                _walk(sub, item, (at, key), found)
    elif type(value) is list:
        items = shape.items
        if items is not None and items.checked:
            for index, item in enumerate(value):
                if item is not None:
                    _walk(items, item, (at, index), found)


def check(shape: Shape, obj: Any) -> None:
    """Raise :class:`~clearance_api.errors.UnknownFields` if ``obj`` has a field its
    kind does not know (``shape``: the whole object's)."""
    found: list[tuple[_Path, str, Mapping[str, Shape]]] = []
    _walk(shape, obj, None, found)
    if found:
        # Only the problems the message names are spelled out (see unknown_fields).
        problems = [_problem(at, suggest=True) for at in found[:MAX_PROBLEMS]]
        raise UnknownFields(problems_message(problems, len(found)),
                            tuple((p.path, p.suggestion) for p in problems))


def problems_message(problems: list[Problem], total: int | None = None) -> str:
    """Problems as one status message (bounded: the first ten, then how many more of the
    ``total``, which defaults to all of them)."""
    shown = "; ".join(str(p) for p in problems[:MAX_PROBLEMS])
    more = (len(problems) if total is None else total) - min(len(problems), MAX_PROBLEMS)
    return shown if more <= 0 else f"{shown}; and {more} more unknown fields"


def _shapes() -> dict[str, Shape]:
    # Imported here: the generated module and the transcriptions are data only.
    from clearance_core.kube import crd_shapes, shapes  # noqa: PLC0415

    return {kind: from_openapi(schema)
            for kind, schema in {**crd_shapes.SCHEMAS, **shapes.SCHEMAS}.items()}


#: The registry's kind -> the shape of its objects (kinds not listed are not checked).
SHAPES: dict[str, Shape] = _shapes()


def check_object(kind: str, obj: Any) -> None:
    """:func:`check` ``obj`` against its kind's shape (``kind``: the registry's token,
    ``monitoraccesspolicy``...); kinds without one are not checked."""
    shape = SHAPES.get(kind)
    if shape is not None:
        check(shape, obj)
