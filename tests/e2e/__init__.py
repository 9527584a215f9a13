"""End-to-end suite: a real kube-apiserver, etcd and kubectl in front of gpugate (docs/e2e.md)."""
