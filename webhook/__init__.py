"""gpugate: admission for GPU pods, and the commands around it.

The tree says which packages exist and each package's note says what it holds and what it never does. The
products (``serve``, ``audit``, ``report``, ``check``, ``certs``, ``fleet``) never import each other; below
them the kernel (``admission``, ``rules``, ``pods``, ``inventory``, ``policy``) is timeless: plain values in,
plain values out, no threads, clock, environment or network. ``kube`` is the only way to the cluster.
pyproject.toml's import contracts hold every line of this.
"""
