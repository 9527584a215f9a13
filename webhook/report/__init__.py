"""``gpugate report``: allocated-but-idle GPU-hours by team, cost center, workload or namespace, from Prometheus.

Holds the command and its queries (``command``, ``queries``, ``prometheus``), the step integration and its
accounting (``compute``, ``chunk``, ``totals``, ``accounting``, ``model``, ``series``), the right-sizing
recommendations (``recommend``) and the renderers (``render*``). Reads Prometheus only: never the cluster,
the webhook or the policy loader; the policies it recommends are written with the policy format's own names
(``webhook.policy.keys``, ``vendors``).
"""
