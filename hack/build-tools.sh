#!/usr/bin/env bash
# Build the pinned tools from the Go module proxy into a cache outside the work tree. Idempotent:
# each finished build is marked by a stamp file and never redone.
#   hack/build-tools.sh                   build what is missing, print the control plane's bin dir
#   hack/build-tools.sh --print-bin-dir   print that dir only if its tools are built (exit 3 if not)
#   hack/build-tools.sh --only SET...     build only these sets (control-plane, prometheus, kind),
#                                         print nothing
#   hack/build-tools.sh --print-kind-dir  print the kind set's bin dir only if built (exit 3 if not)
#   hack/build-tools.sh --print-tool NAME print the path of one tool (etcd, kube-apiserver, kwok,
#                                         helm, promtool, prometheus...) only if built (exit 3 if not)
# Cache directories under ${BATON_TOOLS_CACHE:-~/.cache/baton/k8s}:
#   <k8s version>-<key>/bin     etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#                               kwok, helm; key: hash of versions.env *above* its "own cache key"
#                               marker line, plus RECIPE
#   prometheus-<version>-<key>/bin  promtool, prometheus; key: that version plus PROM_RECIPE
#   kind-<kind version>-<key>/bin   kind, crictl, coredns, kubeadm, kubelet, kubectl, kube-proxy
#                               (what a kind node runs; hack/kind.py); key: KUBERNETES_VERSION,
#                               KUBERNETES_STAGING_VERSION, the KIND_/CRICTL_/COREDNS_ versions,
#                               KIND_RECIPE. Built only with --only kind (make kind-up, the kind tests).
# so adding or bumping a tool below the marker never invalidates the control plane's 7-minute build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# Bump when the build commands below change in a way that changes the binaries: the cache key
# is the versions plus this number, so editing comments or options of this script rebuilds nothing.
RECIPE=1
PROM_RECIPE=1
KIND_RECIPE=1
cache="${BATON_TOOLS_CACHE:-$HOME/.cache/baton/k8s}"
key="$( { sed '/^# --- own cache key/,$d' "$here/versions.env"; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-12)"
root="$cache/${KUBERNETES_VERSION}-${key}"
bin="$root/bin"
prom_key="$(echo "prometheus=$PROMETHEUS_VERSION recipe=$PROM_RECIPE" | sha256sum | cut -c1-12)"
prom_bin="$cache/prometheus-${PROMETHEUS_VERSION}-${prom_key}/bin"
kind_key="$(echo "k8s=$KUBERNETES_VERSION/$KUBERNETES_STAGING_VERSION kind=$KIND_VERSION crictl=$CRICTL_VERSION coredns=$COREDNS_VERSION recipe=$KIND_RECIPE" | sha256sum | cut -c1-12)"
kind_bin="$cache/kind-${KIND_VERSION}-${kind_key}/bin"
log() { echo "[build-tools] $*" >&2; }
stamp() { [[ -f "${2:-$bin}/.$1.ok" ]]; }
if [[ "${1:-}" == "--print-bin-dir" ]]; then
  for t in etcd kwok helm kubernetes; do
    stamp "$t" || { echo "[build-tools] $t is not built in $bin: run make tools" >&2; exit 3; }
  done
  echo "$bin"; exit 0
fi
if [[ "${1:-}" == "--print-kind-dir" ]]; then
  stamp kind "$kind_bin" || { echo "[build-tools] the kind set is not built in $kind_bin: run make kind-up" >&2; exit 3; }
  echo "$kind_bin"; exit 0
fi
if [[ "${1:-}" == "--print-tool" ]]; then
  name="${2:?--print-tool needs a tool name}"
  case "$name" in
    promtool|prometheus) dir="$prom_bin"; st="$name" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler) dir="$bin"; st=kubernetes ;;
    etcd|kwok|helm) dir="$bin"; st="$name" ;;
    *) echo "[build-tools] unknown tool $name" >&2; exit 2 ;;
  esac
  stamp "$st" "$dir" && [[ -x "$dir/$name" ]] || { echo "[build-tools] $name is not built in $dir: run make tools" >&2; exit 3; }
  echo "$dir/$name"; exit 0
fi
only=()
if [[ "${1:-}" == "--only" ]]; then shift; only=("$@"); fi
command -v go >/dev/null || { log "Go (1.26) is required on PATH to build the pinned tools"; exit 1; }
mkdir -p "$bin" "$root/src" "$prom_bin" "$kind_bin"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

done_() { touch "${2:-$bin}/.$1.ok"; }

# A module that requires k8s.io/kubernetes at KUBERNETES_VERSION, in the current directory; sets
# $k8s_ldflags (the version stamps `kubectl version` and the API server report).
k8s_wrapper_module() {
  local k_ver="$KUBERNETES_VERSION" s_ver="$KUBERNETES_STAGING_VERSION"
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
  k8s_ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $p.gitVersion=$k_ver -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
}

build_kubernetes() {
  stamp kubernetes && return 0
  local src="$root/src/kubernetes"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  k8s_wrapper_module
  log "building kube-apiserver kube-controller-manager kube-scheduler (the first time about 13 CPU-minutes: 7 min or more on 2 cores)"
  go build -trimpath -ldflags "$k8s_ldflags" -o "$bin/" \
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

build_prometheus() { # promtool and the server (no web UI assets), in one go install
  stamp promtool "$prom_bin" && stamp prometheus "$prom_bin" && return 0
  # Prometheus release x.y.z is published as Go module version v0.(100x+y).z.
  local m="${PROMETHEUS_VERSION#v0.}" ver
  ver="$(( ${m%%.*} / 100 )).$(( ${m%%.*} % 100 )).${m##*.}"
  local v=github.com/prometheus/common/version
  log "building promtool and prometheus $ver ($PROMETHEUS_VERSION; the first time about 19 CPU-minutes: 10 min or more on 2 cores)"
  GOFLAGS= GOBIN="$prom_bin" go install -trimpath \
    -ldflags "-s -w -X $v.Version=$ver -X $v.Branch=HEAD -X $v.Revision=$PROMETHEUS_VERSION -X $v.BuildUser=baton -X $v.BuildDate=19700101-00:00:00" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  done_ promtool "$prom_bin"; done_ prometheus "$prom_bin"
}

# What a kind node runs besides Debian's packages (hack/kind.py builds the images from these).
build_kind() {
  stamp kind "$kind_bin" && return 0
  local src="$kind_bin/../src/kubernetes"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  k8s_wrapper_module
  log "building kubeadm kubelet kubectl kube-proxy $KUBERNETES_VERSION"
  go build -trimpath -ldflags "$k8s_ldflags" -o "$kind_bin/" \
    k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy
  log "building kind $KIND_VERSION, crictl $CRICTL_VERSION"
  GOFLAGS= GOBIN="$kind_bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
  # github.com/kubernetes-sigs/cri-tools is refused by the proxy: the module path is sigs.k8s.io.
  GOFLAGS= GOBIN="$kind_bin" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  log "building coredns $COREDNS_VERSION (about 6 min on 2 cores the first time)"
  GOFLAGS= GOBIN="$kind_bin" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  done_ kind "$kind_bin"
}

build_control_plane() {
  build_etcd
  build_gobin kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
  build_gobin helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  build_kubernetes
}

# Each set builds under a lock on its directory: a second `make tools` started meanwhile (another
# checkout, a test's fresh clone) waits, then finds the stamps.
locked() { # dir function
  ( flock 9; "$2" ) 9>"$1/.lock"
}

wanted() { [[ ${#only[@]} -eq 0 ]] || [[ " ${only[*]} " == *" $1 "* ]]; }
for set_ in "${only[@]}"; do
  [[ "$set_" == control-plane || "$set_" == prometheus || "$set_" == kind ]] || {
    log "unknown set $set_ (control-plane, prometheus, kind)"; exit 2; }
done
wanted control-plane && locked "$bin" build_control_plane
wanted prometheus && locked "$prom_bin" build_prometheus
# Not in the default set: only the kind route needs it (make kind-up, the kind tests ask for it).
[[ ${#only[@]} -gt 0 ]] && wanted kind && locked "$kind_bin" build_kind
[[ ${#only[@]} -gt 0 ]] || echo "$bin"
