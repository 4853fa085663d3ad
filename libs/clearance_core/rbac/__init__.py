"""Kubernetes RBAC as the API server evaluates it: rules, roles with aggregation,
bindings, the index behind access reviews, and ACM search's row filtering."""
