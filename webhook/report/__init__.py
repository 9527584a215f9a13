"""``gpugate report``: allocated-but-idle GPU-hours by team, cost center, workload or namespace, from Prometheus."""
