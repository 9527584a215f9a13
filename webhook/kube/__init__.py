"""The only package that imports the Kubernetes client (an import contract says so).

Holds the configuration, raw GETs and paging (``client``), the one list+watch loop every watched kind goes
through (``informer``), the caches of ``gpugate serve`` on it: namespace labels (``namespaces``) and the GPU
inventory (``inventory``), and the audit's reads and PolicyReport writes (``cluster``).
Objects are read as plain JSON, never decoded into the client's models (they drop fields they do not know).
Never decides anything: what it reads is handed to the decision as values.
"""
