"""Roles, ClusterRoles, RoleBindings, ClusterRoleBindings and hub Namespaces.

Stored compiled — the parsed :class:`~clearance_core.rbac.rules.Role` or
:class:`~clearance_core.rbac.rules.Binding` under its :func:`~clearance_core.rbac.rules.object_key`,
one key format for the four kinds — like policies: the decision service applies each
change to its index without parsing anything, and a restarted compiler loads the model
from them. An invalid object is withdrawn (absent), as a deleted one. The model keeps
them parsed so a change can name the subjects whose reviews it alters. Checks never read
RBAC, so these changes are announced to clients and invalidate no cached decision.
"""

from __future__ import annotations

from clearance_api.errors import InvalidObject
from clearance_core.folding.folds import FoldEvent, FoldResult
from clearance_core.folding.model import Model, Writes
from clearance_core.rbac.rules import (
    KINDS,
    Binding,
    Role,
    RoleKey,
    object_key,
    parse_binding,
    parse_role,
)


def fold(model: Model, tx: Writes, event: FoldEvent) -> FoldResult:
    ref = event.ref
    kind = KINDS[ref.kind]
    key = object_key(kind, ref.namespace, ref.name)
    present = not event.deleted
    outcome = "compiled" if present else "deleted"
    parsed: Role | Binding | None = None
    error: str | None = None
    if present:
        try:
            parsed = parse_role(event.obj) if kind in ("Role", "ClusterRole") else \
                parse_binding(event.obj)
        except InvalidObject as exc:
            # Withdrawn whole: an invalid binding must not keep granting its old rules.
            outcome, error = "invalid", exc.message
    if kind in ("Role", "ClusterRole"):
        role_key = RoleKey(kind, ref.namespace if kind == "Role" else "", ref.name)
        role = parsed if isinstance(parsed, Role) else None
        tx.announce = model.rbac.affected_by_role(role_key, role)
        model.rbac.put_role(role_key, role)
    else:
        binding = parsed if isinstance(parsed, Binding) else None
        tx.announce = model.rbac.affected_by_binding(key, binding)
        model.rbac.put_binding(key, binding)
    tx.put_rbac(event.seq, key, parsed)
    return FoldResult(outcome, error=error)


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
