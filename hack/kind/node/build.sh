#!/usr/bin/env bash
# Build kind's node image here, without Docker or a registry (`kind build node-image` calls the
# docker CLI and pulls pause, etcd, CoreDNS and kindnetd): a Debian root filesystem from
# mmdebstrap with systemd, containerd, runc and the CNI plugins, kind's own base files from the
# kind module, the Kubernetes binaries built by hack/build-tools.sh, and the control-plane images
# (built FROM scratch under the names kubeadm asks for) in /kind/images, imported at boot.
#   hack/kind/node/build.sh OUT CP_BIN KIND_BIN IMAGE
#     OUT       cache directory; the result is OUT/node.tar (a docker-archive of IMAGE)
#     CP_BIN    kube-apiserver, kube-controller-manager, kube-scheduler, etcd (control-plane set)
#     KIND_BIN  kubeadm, kubelet, kubectl, kube-proxy, crictl, coredns (kind set)
# Called by hack/kind.py, which keys OUT by the content of this directory and the versions.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../../versions.env
source "$here/../../versions.env"
out="$1" cp_bin="$2" kind_bin="$3" image="$4"
mirror="${KIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${KIND_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
work="$out/work"
log() { echo "[kind-node] $*" >&2; }
rm -rf "$work"; mkdir -p "$work/images"
trap 'rm -rf "$work"' EXIT

module_dir() { GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }
kind_src="$(module_dir "sigs.k8s.io/kind@$KIND_VERSION")/images/base/files"
k8s_src="$(module_dir "k8s.io/kubernetes@$KUBERNETES_VERSION")"

debootstrap() { # variant packages target
  mmdebstrap --quiet --variant="$1" --include="$2" "$KIND_DEBIAN_SUITE" "$3" \
    "deb $mirror $KIND_DEBIAN_SUITE main" "deb $mirror $KIND_DEBIAN_SUITE-updates main" \
    "deb $security $KIND_DEBIAN_SUITE-security main"
}

# An image from a root filesystem (a directory or a tar), saved as a docker-archive under its
# name (ctr import and `podman load` keep that name), then removed from the build storage.
save_image() { # name tar-or-dir archive [buildah config args...]
  local name="$1" content="$2" archive="$3" c; shift 3
  c="$(buildah from scratch)"
  buildah add --quiet "$c" "$content" / >/dev/null
  buildah config "$@" "$c"
  buildah commit --quiet --rm "$c" "$name" >/dev/null
  buildah push --quiet "$name" "docker-archive:$archive:$name" >/dev/null
  buildah rmi "$name" >/dev/null
}

# --- the images kubeadm and the kubelet ask for ------------------------------------------------
mapfile -t wanted < <("$kind_bin/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION")
log "images: ${wanted[*]}"
pause_image=""
for name in "${wanted[@]}"; do
  base="${name##*/}"; base="${base%%:*}"
  d="$work/img-$base"
  # mmdebstrap wants a target that does not exist yet: the others make theirs.
  [[ "$base" == kube-proxy ]] || mkdir -p "$d/usr/local/bin"
  case "$base" in
    kube-apiserver|kube-controller-manager|kube-scheduler|etcd)
      cp "$cp_bin/$base" "$d/usr/local/bin/"
      save_image "$name" "$d" "$work/images/$base.tar" --env PATH=/usr/local/bin ;;
    kube-proxy)
      # kube-proxy programs iptables and reads conntrack: a minimal Debian with those.
      debootstrap minbase iptables,nftables,conntrack "$d"
      cp "$kind_bin/kube-proxy" "$d/usr/local/bin/"
      save_image "$name" "$d" "$work/images/$base.tar" ;;
    coredns)
      cp "$kind_bin/coredns" "$d/coredns"
      save_image "$name" "$d" "$work/images/$base.tar" --entrypoint '["/coredns"]' ;;
    pause)
      pause_image="$name"
      gcc -Os -static -DVERSION="${name##*:}" -o "$d/pause" "$k8s_src/build/pause/linux/pause.c"
      save_image "$name" "$d" "$work/images/$base.tar" --entrypoint '["/pause"]' --user 65535:65535 ;;
    *) log "no recipe for image $name"; exit 1 ;;
  esac
done
[[ -n "$pause_image" ]] || { log "kubeadm named no pause image"; exit 1; }

# --- the node's root filesystem --------------------------------------------------------------
log "node rootfs ($KIND_DEBIAN_SUITE)"
root="$work/rootfs"
debootstrap minbase systemd,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,procps,ca-certificates,jq "$root"
# kind's base files, as its images/base/Dockerfile copies them (no fuse-overlayfs: rootful only).
install -m 0755 "$kind_src/usr/local/bin/"* "$root/usr/local/bin/"
mkdir -p "$root/kind/bin" "$root/etc/containerd" "$root/etc/systemd/system/kubelet.service.d" \
  "$root/etc/cni/net.d" "$root/etc/kubernetes/manifests" "$root/opt/cni" "$root/kind/images"
install -m 0644 "$kind_src/kind/README.txt" "$root/kind/"
install -m 0755 "$kind_src/kind/bin/"* "$root/kind/bin/"
install -m 0644 "$kind_src/etc/crictl.yaml" "$root/etc/"
install -m 0644 "$kind_src/etc/default/kubelet" "$root/etc/default/"
install -m 0644 "$kind_src/etc/sysctl.d/"* "$root/etc/sysctl.d/"
for u in containerd.service kubelet.service kubelet.slice undo-mount-hacks.service; do
  install -m 0644 "$kind_src/etc/systemd/system/$u" "$root/etc/systemd/system/"
done
install -m 0644 "$kind_src/etc/systemd/system/kubelet.service.d/"* "$root/etc/systemd/system/kubelet.service.d/"
# This route's own pieces (this directory).
install -m 0644 "$here/baton-import-images.service" "$root/etc/systemd/system/"
install -m 0644 "$here/kubelet.service.d/"* "$root/etc/systemd/system/kubelet.service.d/"
install -m 0644 "$here/10-baton-ptp.conflist" "$root/etc/cni/net.d/"
sed "s|@PAUSE_IMAGE@|$pause_image|" "$here/containerd.toml" > "$root/etc/containerd/config.toml"
# kind's units start /usr/local/bin/containerd; Debian installs it in /usr/bin.
ln -sf /usr/bin/containerd "$root/usr/local/bin/containerd"
ln -sfn /usr/lib/cni "$root/opt/cni/bin"
install -m 0755 "$kind_bin/kubeadm" "$kind_bin/kubelet" "$kind_bin/kubectl" "$root/usr/bin/"
install -m 0755 "$kind_bin/crictl" "$root/usr/local/bin/"
echo "$KUBERNETES_VERSION" > "$root/kind/version"
mv "$work/images/"*.tar "$root/kind/images/"
# The base runtime spec as kind's Dockerfile makes it: `ctr oci spec`, plus kind's
# createContainer hook, minus rlimits.
chroot "$root" ctr oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' > "$root/etc/containerd/cri-base.json"
# systemd as kind's Dockerfile trims it: no units but the ones enabled below.
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
echo "ReadKMsg=no" >> "$root/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
  baton-import-images.service
chroot "$root" systemctl mask systemd-binfmt.service
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*

log "node image $image"
# /dev is the runtime's to fill (podman mounts it); no device nodes in the image.
tar --numeric-owner --exclude="./dev/*" -C "$root" -cf "$work/rootfs.tar" .
rm -rf "$root"
# systemd stops on SIGRTMIN+3 (SIGTERM makes it re-execute); `container` tells it where it runs.
save_image "$image" "$work/rootfs.tar" "$out/node.tar.part" --env container=docker \
  --stop-signal SIGRTMIN+3 --entrypoint '["/usr/local/bin/entrypoint", "/sbin/init"]'
mv "$out/node.tar.part" "$out/node.tar"
