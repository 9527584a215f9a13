#!/usr/bin/env bash
# Builds the pinned helm the chart tests run, from the Go module in tests/chart/tools (go.mod and
# go.sum pin helm and every dependency), into a cache outside the clone keyed by version: the way
# tests/e2e/build.sh builds kubectl. Idempotent: when the binary is there it only says so.
#
#   tests/chart/build-helm.sh            build if needed, print the binary's path on the last line
#   tests/chart/build-helm.sh --print    only print the binary's path (no build)
#
# Cache root: ${GPUGATE_TOOLS_CACHE:-$HOME/.cache/gpugate-tools}. Cold build: see docs/operations.md.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tools="$here/tools"

# The version comes from go.mod, so the cache key cannot drift from what is built.
helm_version="$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")"
if [[ -z "$helm_version" ]]; then
    echo "helm build: cannot read the helm.sh/helm/v4 version from $tools/go.mod" >&2
    exit 2
fi
cache_root="${GPUGATE_TOOLS_CACHE:-$HOME/.cache/gpugate-tools}"
bin="$cache_root/helm-$helm_version/helm"

if [[ "${1:-}" == "--print" ]]; then
    echo "$bin"
    exit 0
fi
if [[ -x "$bin" ]]; then
    echo "helm build: helm $helm_version already built in $bin"
    echo "$bin"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "helm build: 'go' is not on PATH; cannot build helm" >&2
    exit 3
fi

echo "helm build: building helm $helm_version with $(go version) into $bin"
start=$SECONDS
mkdir -p "$cache_root"
tmp="$(mktemp -d "$cache_root/helm.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Version stamp as helm's Makefile sets it (LDFLAGS += -X helm.sh/helm/v4/internal/version.version=...),
# so that `helm version` reports the pinned release.
(
    cd "$tools"
    CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
        -ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" \
        -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
)
mkdir -p "$(dirname "$bin")"
mv -f "$tmp/helm" "$bin"
echo "helm build: done in $((SECONDS - start))s"
"$bin" version --short 2>/dev/null | sed 's/^/helm build: /' || true
echo "$bin"
