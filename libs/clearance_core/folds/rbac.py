"""Roles, ClusterRoles, RoleBindings, ClusterRoleBindings and hub Namespaces.

Stored as served (the decision service indexes them); the model keeps them parsed so a
change can name the subjects whose reviews it alters. Checks never read RBAC, so these
changes are announced to clients and invalidate no cached decision.
"""

from __future__ import annotations

from typing import Any

from clearance_core.errors import InvalidObject
from clearance_core.folds import FoldEvent, FoldResult
from clearance_core.model import Model, Writes
from clearance_core.rbac import Binding, Role, RoleKey, parse_binding, parse_role
from clearance_core.rbac_changes import RbacModel

ROLE_KINDS = {"role": "Role", "clusterrole": "ClusterRole"}


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    ref = event.ref
    present = not event.deleted
    outcome = "compiled" if present else "deleted"
    parsed: Role | Binding | None = None
    if present:
        try:
            parsed = parse_role(event.obj) if ref.kind in ROLE_KINDS else \
                parse_binding(event.obj)
        except InvalidObject:
            # Withdrawn whole: an invalid binding must not keep granting its old rules.
            present, outcome = False, "invalid"
    if ref.kind in ROLE_KINDS:
        role_key = RoleKey(ROLE_KINDS[ref.kind], ref.namespace, ref.name)
        role = parsed if isinstance(parsed, Role) else None
        tx.announce = model.rbac.affected_by_role(role_key, role)
        model.rbac.put_role(role_key, role)
    else:
        binding_key = (ref.kind, f"{ref.namespace}/{ref.name}")
        binding = parsed if isinstance(parsed, Binding) else None
        tx.announce = model.rbac.affected_by_binding(binding_key, binding)
        model.rbac.put_binding(binding_key, binding)
    stored = event.obj if present else None
    tx.put_rbac(event.seq, str(ref), stored)
    if stored is None:
        model.rbac_objects.pop(str(ref), None)
    else:
        model.rbac_objects[str(ref)] = stored
    return FoldResult(outcome)


def fold_namespace(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    """Hub namespaces: what a search plan may enumerate. Only a namespace appearing or
    vanishing matters, and only to the subjects bound inside it."""
    present = not event.deleted
    name = event.ref.name
    if (name in model.namespaces) != present:
        tx.announce = model.rbac.affected_by_namespace(name)
    tx.put_namespace(name, present=present)
    if present:
        model.namespaces.add(name)
    else:
        model.namespaces.discard(name)
    return FoldResult("compiled" if present else "deleted")


def rbac_model(objects: dict[str, dict[str, Any]]) -> RbacModel:
    """The parsed model of stored RBAC objects (a restart; invalid ones are absent)."""
    model = RbacModel()
    for obj in objects.values():
        kind = str(obj.get("kind", "")).lower()
        try:
            if kind in ROLE_KINDS:
                role = parse_role(obj)
                model.put_role(role.key, role)
            else:
                binding = parse_binding(obj)
                meta = obj.get("metadata") or {}
                model.put_binding(
                    (kind, f"{meta.get('namespace') or ''}/{meta.get('name')}"), binding)
        except InvalidObject:
            continue
    return model
