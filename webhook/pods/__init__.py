"""Reading workload objects: where their pod templates live (``objects``; pods an operator builds from fields
that are not templates: ``operated``), the JSON types of the fields rules read (``fields``), how a pod holds
GPUs (``gpus``), its DRA claims (``claims``), its required node-affinity terms (``affinity``) and Kubernetes
quantities (``quantity``).

Pure functions over plain dicts: no I/O, no policy decisions. The rules and the decision build on them.
"""
