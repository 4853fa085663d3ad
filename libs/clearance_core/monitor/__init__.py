"""ClusterPulse's model: MonitorAccessPolicy and MetricSource, resource filters,
aggregations, and the patterns and wildcards policies are written with."""
