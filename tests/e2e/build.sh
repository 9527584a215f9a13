#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kubectl and etcd the end-to-end suite runs, from the Go module
# in tests/e2e/tools, into a cache outside the clone keyed by version. Idempotent: when the three
# binaries are already there it only says so.
#
#   tests/e2e/build.sh            build if needed, print the bin directory on the last line
#   tests/e2e/build.sh --print    only print the bin directory (no build)
#
# Cache root: ${GPUGATE_E2E_CACHE:-$HOME/.cache/gpugate-e2e}. Cold build: see docs/e2e.md.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tools="$here/tools"

# Versions come from go.mod, so the cache key cannot drift from what is built.
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
    echo "e2e build: cannot read the k8s.io/kubernetes and etcd versions from $tools/go.mod" >&2
    exit 2
fi
cache_root="${GPUGATE_E2E_CACHE:-$HOME/.cache/gpugate-e2e}"
bin="$cache_root/${k8s_version}-etcd${etcd_version#v}/bin"

if [[ "${1:-}" == "--print" ]]; then
    echo "$bin"
    exit 0
fi

if [[ -x "$bin/kube-apiserver" && -x "$bin/kubectl" && -x "$bin/etcd" ]]; then
    echo "e2e build: kube-apiserver/kubectl $k8s_version and etcd $etcd_version already built in $bin"
    echo "$bin"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "e2e build: 'go' is not on PATH; cannot build kube-apiserver, kubectl and etcd" >&2
    exit 3
fi

echo "e2e build: building kube-apiserver and kubectl $k8s_version, etcd $etcd_version with $(go version)"
echo "e2e build: into $bin (cold: about 5 minutes on 2 cores plus module downloads; later runs reuse it)"
start=$SECONDS
tmp="$(mktemp -d "$cache_root.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$cache_root" && mktemp -d "$cache_root.tmp.XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT

# Version stamps as the Kubernetes release build sets them (hack/lib/version.sh), so that
# `kubectl version` and the apiserver's /version report the pinned release, not v0.0.0-master.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

(
    cd "$tools"
    export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
    go build -trimpath -ldflags="$ldflags" -o "$tmp/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kubectl
    # etcd's main package is the module root of go.etcd.io/etcd/server/v3 (server/main.go).
    go build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)

mkdir -p "$bin"
for b in kube-apiserver kubectl etcd; do
    mv -f "$tmp/$b" "$bin/$b"
done
echo "e2e build: done in $((SECONDS - start))s"
"$bin/kubectl" version --client 2>/dev/null | sed 's/^/e2e build: /' || true
"$bin/etcd" --version 2>/dev/null | head -1 | sed 's/^/e2e build: /' || true
echo "$bin"
