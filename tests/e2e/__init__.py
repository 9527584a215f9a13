"""End-to-end suite: a real kube-apiserver, etcd and kubectl in front of gpugate (docs/development/e2e.md)."""
