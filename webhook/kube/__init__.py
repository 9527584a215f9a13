"""The only package that imports the Kubernetes client: one configuration and paging helper (``client``), the
serving namespace-label cache (``namespaces``) and the audit's reads and PolicyReport writes (``cluster``)."""
