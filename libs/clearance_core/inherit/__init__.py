"""Inherited AccessPolicies (Defaults & Overrides): targets and their paths, merging, the
inheritance index, authority, CEL conditions, RFC 0009 statuses, dry runs and their
impact."""
