"""The Redis key layout (internal; clients never see it).

Every key starts with ``clr:`` and a fixed kind prefix; the variable part is always the
*last* segment and is never parsed back, so names containing ``:`` or ``,`` cannot make
two keys collide (a ClusterPulse defect: ``policy:{ns}:{name}`` vs ``policy:user:*``).

Compiled state (written only by the compiler, in one fenced Lua script per event):
    clr:rev                 last stream sequence folded (the compiler's checkpoint)
    clr:layout              the layout version the state was built in (``LAYOUT``): a
                            store built in another (or before the marker) is rebuilt
    clr:built               "<target seq>:<build id>", set (with a wipe of all derived keys)
                            when the compiler starts
                            building from the stream's first event; no per-event write
                            touches it, so a store holding a checkpoint without it was
                            flushed or replaced underneath and holds part of the state
    clr:pol                 HASH  "ns/name" -> msgpack CompiledPolicy
    clr:polraw              HASH  "ns/name" -> JSON policy object (to re-check it)
    clr:ms                  HASH  custom type -> msgpack CompiledSource in force for it
    clr:msobj2              HASH  MetricSource "ns/name" -> msgpack CompiledSource (every
                                  valid one: the winner per type is chosen among them)
    clr:mc                  HASH  cluster -> JSON labels (the ManagedCluster inventory)
    clr:ns                  SET   hub namespaces (Namespace objects), for search plans
    clr:mcs2                HASH  ManagedClusterSet that exists -> "" (a hash, not a set:
                                  the change records carry hash fields to the mirrors)
    clr:rbac2               HASH  object key -> msgpack Role or Binding (clearance_core.rbac.rules,
                                  compiled; ``rbac.object_key``: "Kind/ns/name", one format
                                  for the four kinds; invalid objects are absent)
    clr:rbac                (no longer written) RBAC as JSON objects, before they were
                                  stored compiled: a store holding it is rebuilt
    clr:grp                 HASH  group -> JSON sorted users
    clr:ap                  HASH  AccessPolicy "ns/name" -> msgpack CompiledAccessPolicy
                                  (valid ones only)
    clr:ap:bad              HASH  AccessPolicy "ns/name" -> why it is invalid
    clr:ap:st               HASH  AccessPolicy "ns/name" -> JSON conditions (RFC 0009)
    clr:ap:unset            "1"/"0": CLEARANCE_ALLOW_UNSET the state was built with (a
                            compiler started with the other value rebuilds it)
    clr:ap:admins           the admin namespaces (CLEARANCE_ADMIN_NAMESPACES, sorted,
                            comma-joined) the state was built with: a compiler started
                            with others, or a store built before policy authority (no
                            such key), rebuilds it
    clr:mcsb                HASH  JSON [namespace, name] -> JSON [namespace, name,
                                  spec.clusterSet] of every ManagedClusterSetBinding that
                                  reads (bound or not: named otherwise than its set, it
                                  binds nothing)
    clr:ap:out              HASH  AccessPolicy "ns/name" -> msgpack ExcludedAt: where a
                                  policy that takes no part was aimed, and why
    clr:apx:<target>        HASH  AccessPolicy "ns/name" -> JSON ExcludedPolicy: the
                                  policies aimed at that target that take no part
                                  (<target>: JSON [kind, cluster or "", name])
    clr:eff                 HASH  "Fleet/fleet", "ClusterSet/<name>", "Cluster/<name>"
                                  -> msgpack EffectivePolicy of that target
    clr:effns:<cluster>     HASH  namespace -> msgpack EffectivePolicy of that Namespace
                                  target (materialised ones: a policy names them)
    clr:changes             STREAM one record per event, id "<rev>-0": r (the ChangeRecord,
                                  for the invalidator), v (msgpack [hash, field, value or
                                  nil] of every mirrored field written, for the decision
                                  services' mirrors; absent when too large)
    clr:<family>            HASH  a family a registered kind declares (``clearance_core.
                                  families``: its hash under clr:, never one of the above)
No longer written (a store holding them is left alone; a rebuild's wipe removes them):
``clr:mcs`` (the cluster sets as a SET), ``clr:ap:rev`` (where readers rebuilt their
simulation index: the mirrors now hold the AccessPolicies themselves),
``clr:pidx:*`` and ``clr:memb:*`` (policy and membership indexes: the decision service's
mirror derives its own), ``clr:rbac:rev`` and ``clr:rbac:log`` (the RBAC change log: the
change records carry RBAC).
Invalidator:
    clr:inval:rev           last change record applied (the system's revision)
    clr:inval:epoch         how many invalidation calls naming cached entries ran (each
                            adds one, with its deletions): a decision process reuses a
                            reply read from the cache only while it has not moved
Decision cache:
    clr:dc3:<digest>        a 2-byte length, msgpack [cluster | false, deciding policy's
                            order | nil] (read by the narrowed invalidation's Lua), then
                            msgpack [CheckResult, valid until (POSIX s) | nil] (TTL)
    clr:dt3:<digest>        msgpack [valid until | nil, zlib msgpack trace]: the same
                            check's explanation, cached only when one was asked (TTL)
    clr:db3:<digest>        the answers of a whole batch that missed the cache (one
                            entry, one write): the header of an entry about no cluster
                            in the inventory, then msgpack [[CheckResult...], valid
                            until | nil]; indexed under the union of its answers'
                            indexes, and dropped whole by any invalidation that reaches
                            it (TTL)
    clr:dci:u:<name>        SET   cache keys (entries and explanations) of a username or
                                  email (index sets: no TTL)
    clr:dci:g:<group>       SET   cache keys computed with this effective group
    clr:dci:c:<cluster>     SET   cache keys about this cluster
    clr:dci:p:<digest>      SET   cache keys of one principal (cache.clear)
    clr:dci:all             ZSET  cache key -> expiry (ms): exact entry counts
Memory (Valkey runs with ``maxmemory-policy volatile-lru``): only ``clr:dc3:``,
``clr:dt3:`` and ``clr:db3:`` entries carry a TTL, so they are the only keys eviction may
remove. Compiled state, the change streams and the cache index sets carry none: an
evicted index would leave live entries that no invalidation can reach. Dangling index
members (their entry expired or was evicted) are swept by the invalidator every minute.
At the limit with nothing left to evict, Valkey refuses writes: the compiler retries, the
decision service answers without caching.
Operations:
    clr:svc:<service>       HASH  revision, heartbeat (ms), lag
    clr:svc:<service>@<id>  HASH  the same, per replica of a service that runs several at
                                  once (decision: each process its own, named by its id)
    clr:svc:<service>:replicas SET  the ids of those replicas (one gone quiet for
                                  health.FORGET_AFTER_MS is removed with its key)
    clr:stats               HASH  hits, misses
    clr:census              JSON  kind -> state -> policies (the active compiler's, every 2 s)
"""

from __future__ import annotations

from collections.abc import Callable

REV = "clr:rev"
BUILT = "clr:built"
LAYOUT_KEY = "clr:layout"
#: The layout this version writes; moved whenever a family changes shape or meaning.
LAYOUT = "2"
POLICIES = "clr:pol"
CLUSTERS = "clr:mc"
POLICY_OBJECTS = "clr:polraw"
RBAC = "clr:rbac2"
RBAC_JSON = "clr:rbac"
NAMESPACES = "clr:ns"
CLUSTER_SETS = "clr:mcs2"
SOURCES = "clr:ms"
SOURCE_OBJECTS = "clr:msobj2"
GROUPS = "clr:grp"
CHANGES = "clr:changes"
ACCESS_POLICIES = "clr:ap"
ACCESS_INVALID = "clr:ap:bad"
ACCESS_STATUS = "clr:ap:st"
ALLOW_UNSET = "clr:ap:unset"
ADMIN_NAMESPACES = "clr:ap:admins"
BINDINGS = "clr:mcsb"
EXCLUDED = "clr:ap:out"
EFFECTIVE = "clr:eff"
INVALIDATED_REV = "clr:inval:rev"
INVALIDATED_EPOCH = "clr:inval:epoch"
CACHE_ALL = "clr:dci:all"
#: The cached answers that warn of a cluster or a type Clearance does not know: an index
#: set like the others (swept with them), dropped whole when the inventory's or the
#: declared types' names change.
CACHE_WARNED = "clr:dci:w:names"
STATS = "clr:stats"
CENSUS = "clr:census"


def effective_in(cluster: str) -> str:
    return f"clr:effns:{cluster}"


def excluded_at(target: str) -> str:
    """``target``: the target as JSON (``inherit_store.excluded_key`` makes it)."""
    return f"clr:apx:{target}"


#: Cached answers' and explanations' key prefixes (the narrowed invalidation's Lua tells
#: them apart by the first TRACE_PREFIX_LEN characters).
ENTRY_PREFIX = "clr:dc3:"
TRACE_PREFIX = "clr:dt3:"


def cache_entry(digest: str) -> str:
    # dc3: the entry starts with the header the narrowed invalidation reads (a version
    # reading another form would fail on it, so the forms never share keys).
    return f"{ENTRY_PREFIX}{digest}"


def cache_trace(digest: str) -> str:
    """The cached explanation (trace) of the answer cached under ``cache_entry``."""
    return f"{TRACE_PREFIX}{digest}"


def cache_batch(digest: str) -> str:
    """The cached answers of a whole batch (digest of its principal and checks). Not an
    ENTRY_PREFIX key: the narrowed invalidation keeps none of these, it drops them."""
    return f"clr:db3:{digest}"


def cache_by_user(name: str) -> str:
    return f"clr:dci:u:{name}"


def cache_by_group(group: str) -> str:
    return f"clr:dci:g:{group}"


def cache_by_cluster(cluster: str) -> str:
    return f"clr:dci:c:{cluster}"


def cache_by_principal(digest: str) -> str:
    return f"clr:dci:p:{digest}"


def service(name: str) -> str:
    return f"clr:svc:{name}"


def service_replica(name: str, replica: str) -> str:
    return f"clr:svc:{name}@{replica}"


def service_replicas(name: str) -> str:
    return f"clr:svc:{name}:replicas"


def prefix(family: Callable[[str], str]) -> str:
    """The fixed part of a key family (``prefix(effective_in)`` is ``clr:effns:``), for Lua
    scripts that append the variable part themselves: they name no key of their own."""
    fixed = family("")
    if family("\x00") != f"{fixed}\x00":  # the variable part must be the whole suffix
        raise ValueError(f"{family.__name__} does not end with its variable part")
    return fixed
