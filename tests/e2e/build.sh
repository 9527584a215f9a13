#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and etcd the
# end-to-end suite runs, from the Go module in tests/e2e/tools, and kwok (the fleet's simulated
# kubelets) from the Go module in tests/e2e/kwok, into a cache outside the clone keyed by version.
# Idempotent: binaries already there are not rebuilt; only missing ones are.
#
#   tests/e2e/build.sh            build if needed, print the bin directory on the last line
#   tests/e2e/build.sh --print       only print the bin directory (no build)
#   tests/e2e/build.sh --print-kwok  only print kwok's directory (kwok and its stages.yaml; no build)
#
# Cache root: ${GPUGATE_E2E_CACHE:-$HOME/.cache/gpugate-e2e}. Cold build: see docs/development/e2e.md.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tools="$here/tools"
kwok_tools="$here/kwok"

# Versions come from go.mod, so the cache key cannot drift from what is built.
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$tools/go.mod")"
kwok_version="$(awk '$1 == "sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2; exit}' "$kwok_tools/go.mod")"
if [[ -z "$k8s_version" || -z "$etcd_version" || -z "$kwok_version" ]]; then
    echo "e2e build: cannot read the k8s.io/kubernetes, etcd and kwok versions from $tools/go.mod and $kwok_tools/go.mod" >&2
    exit 2
fi
cache_root="${GPUGATE_E2E_CACHE:-$HOME/.cache/gpugate-e2e}"
bin="$cache_root/${k8s_version}-etcd${etcd_version#v}/bin"

# kwok and its stages live beside the control plane, in their own directory keyed by kwok's version.
kwok_dir="$cache_root/kwok-${kwok_version}"

if [[ "${1:-}" == "--print-kwok" ]]; then
    echo "$kwok_dir"
    exit 0
fi
if [[ "${1:-}" == "--print" ]]; then
    echo "$bin"
    exit 0
fi

k8s_binaries=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd)
missing=()
for b in "${k8s_binaries[@]}"; do
    [[ -x "$bin/$b" ]] || missing+=("$b")
done
kwok_missing=0
[[ -x "$kwok_dir/kwok" && -s "$kwok_dir/stages.yaml" ]] || kwok_missing=1

if [[ ${#missing[@]} -eq 0 && $kwok_missing -eq 0 ]]; then
    echo "e2e build: ${k8s_binaries[*]} ($k8s_version, etcd $etcd_version) already built in $bin"
    echo "e2e build: kwok $kwok_version already built in $kwok_dir"
    echo "$bin"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    [[ $kwok_missing -eq 1 ]] && missing+=(kwok)
    echo "e2e build: 'go' is not on PATH; cannot build ${missing[*]}" >&2
    exit 3
fi

start=$SECONDS
mkdir -p "$cache_root"
tmp="$(mktemp -d "$cache_root.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [[ ${#missing[@]} -gt 0 ]]; then
    echo "e2e build: building ${missing[*]} ($k8s_version, etcd $etcd_version) with $(go version)"
    echo "e2e build: into $bin (cold: about 8 minutes on 2 cores plus module downloads; later runs reuse it)"
    # Version stamps as the Kubernetes release build sets them (hack/lib/version.sh), so that
    # `kubectl version` and the apiserver's /version report the pinned release, not v0.0.0-master.
    minor="${k8s_version#v1.}"; minor="${minor%%.*}"
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    packages=()
    for b in "${missing[@]}"; do
        [[ "$b" == etcd ]] || packages+=("k8s.io/kubernetes/cmd/$b")
    done
    (
        cd "$tools"
        export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
        if [[ ${#packages[@]} -gt 0 ]]; then
            go build -trimpath -ldflags="$ldflags" -o "$tmp/" "${packages[@]}"
        fi
        if [[ " ${missing[*]} " == *" etcd "* ]]; then
            # etcd's main package is the module root of go.etcd.io/etcd/server/v3 (server/main.go).
            go build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
        fi
    )
    mkdir -p "$bin"
    for b in "${missing[@]}"; do
        mv -f "$tmp/$b" "$bin/$b"
    done
fi

if [[ $kwok_missing -eq 1 ]]; then
    echo "e2e build: building kwok $kwok_version into $kwok_dir (cold: about 80 s on 2 cores)"
    mkdir -p "$tmp/kwok"
    (
        cd "$kwok_tools"
        export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
        go build -trimpath -ldflags="-s -w" \
            -o "$tmp/kwok/kwok" sigs.k8s.io/kwok/cmd/kwok
        # kwok ships no built-in stages: the "fast" node and pod stages are data in its module,
        # kustomize/stage/node/fast/node-initialize.yaml and kustomize/stage/pod/fast/pod-*.yaml
        # (a Node becomes Ready at once; a bound Pod Running; a Job's Pod Succeeded; a deleted Pod
        # goes). They are read from the module cache here and joined into one kwok --config file.
        module_dir="$(go mod download -json sigs.k8s.io/kwok@"$kwok_version" | awk -F'"' '$2 == "Dir" {print $4}')"
        {
            for f in "$module_dir"/kustomize/stage/node/fast/node-initialize.yaml \
                "$module_dir"/kustomize/stage/pod/fast/pod-ready.yaml \
                "$module_dir"/kustomize/stage/pod/fast/pod-complete.yaml \
                "$module_dir"/kustomize/stage/pod/fast/pod-delete.yaml; do
                echo "---"
                echo "# from sigs.k8s.io/kwok@$kwok_version ${f#"$module_dir"/}"
                cat "$f"
            done
        } > "$tmp/kwok/stages.yaml"
    )
    mkdir -p "$kwok_dir"
    mv -f "$tmp/kwok/kwok" "$tmp/kwok/stages.yaml" "$kwok_dir/"
fi

echo "e2e build: done in $((SECONDS - start))s"
"$bin/kubectl" version --client 2>/dev/null | sed 's/^/e2e build: /' || true
"$bin/etcd" --version 2>/dev/null | head -1 | sed 's/^/e2e build: /' || true
"$kwok_dir/kwok" --version 2>/dev/null | head -1 | sed 's/^/e2e build: /' || true
echo "$bin"
