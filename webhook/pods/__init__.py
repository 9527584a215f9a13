"""Reading workload objects: where their pod templates live (``objects``), how a pod holds GPUs, and
Kubernetes quantities (``quantity``). Pure functions over plain dicts; the rules and the decision build on them."""
