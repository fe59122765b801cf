#!/usr/bin/env bash
# Build the real Volcano scheduler and controller manager the baseline-fidelity harness
# runs (bench/realsched.py --system volcano, bench/real_volcano.py) and copy their CRDs
# (config/crd/*/bases) next to them. The Go module proxy refuses volcano.sh/volcano at
# every version, so the source is a checkout (or snapshot) of
# github.com/volcano-sh/volcano given as SRC_DIR; its dependencies come from the module
# proxy (volcano.sh/apis is in the source tree, staging/src/volcano.sh/apis). Nothing is
# committed: the output folder is git-ignored.
#
# Usage: tools/volcano/build.sh SRC_DIR [OUT_DIR]   (default: .volcano-bin at the root)
# Needs Go (the version in SRC_DIR/go.mod) and the Go module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "${1:?usage: tools/volcano/build.sh SRC_DIR [OUT_DIR]}" && pwd)"
out="$(mkdir -p "${2:-$here/../../.volcano-bin}" && cd "${2:-$here/../../.volcano-bin}" && pwd)"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
start=$SECONDS
for cmd in scheduler controller-manager; do
  (cd "$src" && nice -n "${KUBE_BUILD_NICE:-10}" go build -ldflags "-s -w" \
    -o "$out/vc-$cmd" "./cmd/$cmd")
done
echo "built vc-scheduler and vc-controller-manager in $((SECONDS - start)) s"
rm -rf "$out/volcano-crds" && mkdir -p "$out/volcano-crds"
cp "$src"/config/crd/*/bases/*.yaml "$out/volcano-crds/"
rev=${VOLCANO_REV:-$(cd "$src" && git rev-parse --short HEAD 2>/dev/null || echo "snapshot")}
echo "volcano $rev ($(sed -n 's/^\s*k8s.io\/api v/k8s.io\/api v/p' "$src/go.mod" | head -1), $(go version | cut -d' ' -f3))" > "$out/VERSIONS"
ls -l "$out"
