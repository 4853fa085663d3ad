"""What every process shares: settings, logs, metrics, heartbeats and probes, the garbage
collector, the retry policy, outages, embedded servers."""
