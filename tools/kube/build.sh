#!/usr/bin/env bash
# Build the real control plane the Kubernetes-backend tests run against (tests/realkube):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, from source at
# the versions pinned by the go.mod/go.sum files beside this script (one module per
# upstream, since kwok and Kubernetes pin different k8s.io library versions).
#
# Usage: tools/kube/build.sh [OUT_DIR]   (default: .kube-bin at the repository root)
# The tests find the binaries through KUBEBUILDER_ASSETS (controller-runtime's envtest
# convention), defaulting to .kube-bin, so binaries from setup-envtest plus a kwok binary
# work just as well. Needs Go (the version in the go.mod files) and the Go module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/../../.kube-bin}" && cd "${1:-$here/../../.kube-bin}" && pwd)"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
# Nice by default: the machines this runs on are shared.
nice_cmd=(nice -n "${KUBE_BUILD_NICE:-10}")

# The pinned version of module $1 in tools/kube/$2/go.mod (a require line, direct or in a block)
version() { sed -n "s|^[[:space:]]*\(require \)\{0,1\}$1 \(v[^ ]*\).*|\2|p" "$here/$2/go.mod"; }

build() {  # build MODULE_DIR LDFLAGS PACKAGE...
  local dir=$1 ldflags=$2; shift 2
  local start=$SECONDS
  (cd "$here/$dir" && "${nice_cmd[@]}" go build -ldflags "-s -w $ldflags" -o "$out/" "$@")
  echo "built $* in $((SECONDS - start)) s"
}

k8s=$(version k8s.io/kubernetes kubernetes)
IFS=. read -r major minor _ <<<"${k8s#v}"
kv=k8s.io/component-base/version
build etcd "" go.etcd.io/etcd/server/v3
# The etcd module's main package is named for its directory; envtest expects "etcd".
mv -f "$out/v3" "$out/etcd" 2>/dev/null || mv -f "$out/server" "$out/etcd" 2>/dev/null || true
build kubernetes "-X $kv.gitVersion=$k8s -X $kv.gitMajor=$major -X $kv.gitMinor=$minor \
  -X $kv.gitTreeState=clean -X $kv.buildDate=1970-01-01T00:00:00Z" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler
kwok=$(version sigs.k8s.io/kwok kwok)
build kwok "-X sigs.k8s.io/kwok/pkg/consts.Version=${kwok#v}" sigs.k8s.io/kwok/cmd/kwok
{ echo "kubernetes $k8s"; echo "etcd $(version go.etcd.io/etcd/server/v3 etcd)"; echo "kwok $kwok"; } \
  > "$out/VERSIONS"
ls -l "$out"
