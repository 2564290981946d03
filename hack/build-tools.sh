#!/usr/bin/env bash
# Build the pinned control-plane binaries from the Go module proxy into a cache outside the
# work tree (default ~/.cache/baton/k8s/<versions-hash>/bin). Idempotent: a finished build is
# marked by a stamp file and never redone. Prints the bin directory on stdout.
#   hack/build-tools.sh                  build what is missing, print the bin directory
#   hack/build-tools.sh --print-bin-dir  print it only if everything is built (exit 3 if not)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# Bump when the build commands below change in a way that changes the binaries: the cache key
# is the versions plus this number, so editing comments or options of this script rebuilds nothing.
RECIPE=1
key="$( { cat "$here/versions.env"; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-12)"
root="${BATON_TOOLS_CACHE:-$HOME/.cache/baton/k8s}/${KUBERNETES_VERSION}-${key}"
bin="$root/bin"
log() { echo "[build-tools] $*" >&2; }
stamp() { [[ -f "$bin/.$1.ok" ]]; }
if [[ "${1:-}" == "--print-bin-dir" ]]; then
  for t in etcd kwok helm kubernetes; do
    stamp "$t" || { echo "[build-tools] $t is not built in $bin: run make tools" >&2; exit 3; }
  done
  echo "$bin"; exit 0
fi
mkdir -p "$bin" "$root/src"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

done_() { touch "$bin/.$1.ok"; }

build_kubernetes() {
  stamp kubernetes && return 0
  local src="$root/src/kubernetes" k_ver="$KUBERNETES_VERSION" s_ver="$KUBERNETES_STAGING_VERSION"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  log "resolving k8s.io/kubernetes@$k_ver"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$k_ver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  go mod init baton.local/k8s-build >/dev/null 2>&1
  go mod edit -go=1.26.0 -require="k8s.io/kubernetes@$k_ver"
  # The staging modules are replaced by ./staging paths in kubernetes' own go.mod; a dependency's
  # replaces are ignored, so point each one at its published version instead.
  local staging
  staging="$(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" | awk '{print $1}')"
  [[ -n "$staging" ]] || { log "no staging replaces found in $gomod"; exit 1; }
  for m in $staging; do go mod edit -replace="$m=$m@$s_ver"; done
  log "staging modules: $(echo "$staging" | wc -l)"
  local major minor
  major="$(echo "$k_ver" | cut -d. -f1 | tr -d v)"; minor="$(echo "$k_ver" | cut -d. -f2)"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$k_ver -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kube-apiserver kube-controller-manager kube-scheduler (slow the first time)"
  go build -trimpath -ldflags "$ld" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler
  done_ kubernetes
}

build_etcd() {
  stamp etcd && return 0
  local src="$root/src/etcd"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  go mod init baton.local/etcd-build >/dev/null 2>&1
  go mod edit -go=1.26.0 -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  log "building etcd $ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
  done_ etcd
}

build_gobin() { # name module version [extra ldflags]
  stamp "$1" && return 0
  log "building $1 $3"
  GOFLAGS= GOBIN="$bin" go install -trimpath -ldflags "-s -w ${4:-}" "$2@$3"
  done_ "$1"
}

build_etcd
build_gobin kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
build_gobin helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
build_kubernetes
echo "$bin"
