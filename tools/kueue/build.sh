#!/usr/bin/env bash
# Build the real Kueue controller manager the baseline-fidelity harness runs
# (bench/realsched.py), from source at the version pinned by go.mod/go.sum beside this
# script, and copy its CRDs (config/components/crd/bases of the same module version) next
# to it. Nothing fetched is committed: the output folder is git-ignored.
#
# Usage: tools/kueue/build.sh [OUT_DIR]   (default: .kueue-bin at the repository root)
# Needs Go (the version in go.mod) and the Go module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/../../.kueue-bin}" && cd "${1:-$here/../../.kueue-bin}" && pwd)"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
kueue=$(sed -n 's|^[[:space:]]*\(require \)\{0,1\}sigs.k8s.io/kueue \(v[^ ]*\).*|\2|p' "$here/go.mod")
start=$SECONDS
(cd "$here" && nice -n "${KUBE_BUILD_NICE:-10}" go build \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue" -o "$out/kueue" \
  sigs.k8s.io/kueue/cmd/kueue)
echo "built kueue $kueue in $((SECONDS - start)) s"
src=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$out/kueue-crds" && mkdir -p "$out/kueue-crds"
cp "$src"/config/components/crd/bases/*.yaml "$out/kueue-crds/"
chmod -R u+w "$out/kueue-crds"
echo "kueue $kueue" > "$out/VERSIONS"
ls -l "$out"
