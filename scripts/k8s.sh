#!/usr/bin/env bash
# Starts and stops the single-node Kubernetes cluster that the Kubernetes
# executor tier's tests run on (issue 29; shared/research/k8s-node.md):
#
#   scripts/k8s.sh start [HOLDER]  build (scripts/k8s-build.sh, cached), start
#                                  the cluster unless it runs, import the
#                                  images, wait until pods are accepted
#   scripts/k8s.sh stop  [HOLDER]  drop HOLDER's lease; when none is left,
#                                  delete every pod, stop everything and undo
#                                  what the cluster did to the host
#   scripts/k8s.sh restart NAME    stop one component and start it again with
#                                  the same command line (fault tests)
#   scripts/k8s.sh status          exit 0 when the apiserver answers
#   scripts/k8s.sh kubeconfig      print the admin kubeconfig's path
#   scripts/k8s.sh env             print the variables the tests read
#
# HOLDER (default: the caller's pid) works as in scripts/dockerd.sh: every
# start records a lease, and stop stops the cluster only once no lease with
# a living holder is left.
#
# The cluster: kine (etcd's API on SQLite), kube-apiserver, containerd with
# Debian's runc, the kubelet, kube-scheduler and kube-controller-manager.
# Every listener is on 127.0.0.1; the node is named 127.0.0.1. Pods are on
# an isolated bridge (sgk8s0): the host has no address on it, there is no
# gateway, no masquerade and no route, so nothing from a pod leaves the
# machine or reaches the host; and bridge port isolation is set on every
# pod's port (scripts/k8s-cni-isolate), so pods cannot reach each other
# either. Image pulls go to a dead loopback port: every image is imported.
#
# Host-specific settings this kind of machine needs (k8s-node.md §3):
# the kubelet runs with failCgroupV1: false, cgroupDriver: cgroupfs and
# failSwapOn: false (cgroup v1, swap); containerd with
# restrict_oom_score_adj = true (root here lacks CAP_SYS_RESOURCE); the
# kubelet with --hostname-override=127.0.0.1.
#
# What it changes on the host and stop undoes: the sysctls the kubelet
# sets (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops: saved at
# start, restored), the kubepods cgroups, the cni-* network namespaces and
# the bridge, and every mount under its state directories. The binaries and
# containerd's image store are kept (per machine, under $ROOT), so the next
# start imports nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${SANDGATE_K8S_CACHE:-/var/lib/sandgate/k8s}
RUN=${SANDGATE_K8S_STATE:-$ROOT/run}
CTRD_ROOT=$ROOT/containerd
RUNDIR=/run/sandgate-k8s
SOCK=$RUNDIR/containerd.sock
LEASES=$RUNDIR/leases
BRIDGE=sgk8s0
POD_CIDR=${SANDGATE_K8S_POD_CIDR:-10.244.77.0/24}
WAIT_S=${SANDGATE_K8S_WAIT:-120}
COMPONENTS=(kine kube-apiserver containerd kubelet kube-scheduler kube-controller-manager)

mode=${1:-}
holder=${2:-$PPID}
BIN=$("$here/scripts/k8s-build.sh" bindir)
KUBECONFIG_ADMIN=$RUN/pki/admin.kubeconfig

log() { echo "k8s: $*" >&2; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { cat "$RUNDIR/$1.pid" 2>/dev/null || true; }
kubectl_() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
api_up() { [ -f "$KUBECONFIG_ADMIN" ] && kubectl_ get --raw /readyz >/dev/null 2>&1; }

live_leases() {
  local f n=0
  for f in "$LEASES"/*; do
    [ -e "$f" ] || continue
    if alive "$(basename "$f")"; then n=$((n + 1)); else rm -f "$f"; fi
  done
  echo "$n"
}

# wait_for WHAT CMD...: retries CMD for WAIT_S seconds.
wait_for() {
  local what=$1 i
  shift
  for ((i = 0; i < WAIT_S * 4; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  log "timed out waiting for $what; logs in $RUN/logs"
  return 1
}

# launch NAME CMD...: starts a component in the background, its own
# session, logging to $RUN/logs/NAME.log.
launch() {
  local name=$1
  shift
  # The command line, for restart.
  printf '%s\0' "$@" >"$RUNDIR/$name.cmd"
  # fd 9 is the start/stop lock: a component must not hold it.
  setsid "$@" >>"$RUN/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$RUNDIR/$name.pid"
}

# restart_component NAME: stops one component and starts it again with
# the same command line (the fault tests: an apiserver restart).
restart_component() {
  local name=$1 args
  [ -f "$RUNDIR/$name.cmd" ] || { log "no saved command line for $name (is the cluster up?)"; return 1; }
  mapfile -d '' args <"$RUNDIR/$name.cmd"
  stop_component "$name"
  launch "$name" "${args[@]}"
  case $name in
  kube-apiserver) wait_for apiserver api_up ;;
  kubelet | containerd) wait_for "node Ready" node_ready ;;
  esac
  log "$name restarted"
}

pki() {
  local d=$RUN/pki
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj /CN=sandgate-k8s-ca 2>/dev/null
    sign() { # NAME SUBJ [SAN]
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s\n' \
        "${3:+subjectAltName=$3}" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 30 -extfile "$1.ext" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    sign apiserver /CN=kube-apiserver "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
    sign kubelet /CN=127.0.0.1 "IP:127.0.0.1,DNS:localhost"
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    tok() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
    admin=$(tok) node=$(tok) cm=$(tok) sched=$(tok)
    {
      echo "$admin,admin,admin,\"system:masters\""
      echo "$node,system:node:127.0.0.1,kubelet,\"system:nodes\""
      echo "$cm,system:kube-controller-manager,kcm"
      echo "$sched,system:kube-scheduler,ksched"
    } >tokens.csv
    for kc in admin:$admin kubelet:$node controller-manager:$cm scheduler:$sched; do
      cat >"${kc%%:*}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$d/ca.crt"}
users:
- name: u
  user: {token: "${kc#*:}"}
contexts:
- name: c
  context: {cluster: local, user: u}
current-context: c
EOF
    done
    chmod 0600 ./*.key tokens.csv ./*.kubeconfig
  )
}

configs() {
  local etc=$RUN/etc pause=$1
  mkdir -p "$etc/cni" "$etc/certs.d/_default" "$RUN/kubelet" "$RUN/pod-logs" "$RUN/manifests"
  printf '[host."http://127.0.0.1:1"]\n  capabilities = ["pull", "resolve"]\n' >"$etc/certs.d/_default/hosts.toml"
  printf 'server = "http://127.0.0.1:1"\n' >>"$etc/certs.d/_default/hosts.toml"
  cat >"$etc/cni/10-sandgate.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandgate-isolated",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$RUN/cni-ipam"}},
    {"type": "sandgate-isolate"}
  ]
}
EOF
  mkdir -p "$RUN/cni-bin"
  ln -sfn /usr/lib/cni/bridge "$RUN/cni-bin/bridge"
  ln -sfn /usr/lib/cni/host-local "$RUN/cni-bin/host-local"
  ln -sfn /usr/lib/cni/loopback "$RUN/cni-bin/loopback"
  install -m 0755 "$here/scripts/k8s-cni-isolate" "$RUN/cni-bin/sandgate-isolate"
  cat >"$etc/containerd.toml" <<EOF
version = 3
root = "$CTRD_ROOT"
state = "$RUNDIR/containerd"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "docker.io/$pause"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$etc/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$RUNDIR/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$RUN/cni-bin"]
    conf_dir = "$etc/cni"
EOF
  cat >"$etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://$SOCK
tlsCertFile: $RUN/pki/kubelet.crt
tlsPrivateKeyFile: $RUN/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization: {mode: Webhook}
makeIPTablesUtilChains: false
podLogsDir: $RUN/pod-logs
staticPodPath: $RUN/manifests
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 120
podPidsLimit: 1024
serializeImagePulls: false
EOF
}

save_sysctls() {
  [ -f "$RUN/sysctls.saved" ] && return 0
  sysctl -n vm.overcommit_memory kernel.panic kernel.panic_on_oops |
    paste -d' ' <(printf '%s\n' vm.overcommit_memory kernel.panic kernel.panic_on_oops) - >"$RUN/sysctls.saved"
}

restore_sysctls() {
  local k v
  [ -f "$RUN/sysctls.saved" ] || return 0
  while read -r k v; do sysctl -qw "$k=$v" || true; done <"$RUN/sysctls.saved"
  rm -f "$RUN/sysctls.saved"
}

# import_images imports what this checkout's images add into the running
# containerd (hashed: nothing when unchanged) and records their refs.
import_images() {
  local refs
  refs=$(SANDGATE_K8S_CONTAINERD_SOCK=$SOCK "$here/scripts/k8s-images.sh" import)
  echo "$refs" >"$RUN/images"
  echo "${refs#* }" >"$RUN/sandbox-image"
}

start_cluster() {
  local began=$SECONDS refs pause
  "$here/scripts/k8s-build.sh" >/dev/null
  # A previous run that died without stop: clean up first.
  if [ -d "$RUN" ] && ! api_up; then stop_cluster; fi
  mkdir -p "$RUN/logs" "$RUNDIR" "$CTRD_ROOT"
  ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' >"$RUN/netns.before" || true
  save_sysctls
  pki
  # containerd reads the pinned sandbox image at start: the images are
  # built (by Docker) first, and imported once containerd runs.
  refs=$("$here/scripts/k8s-images.sh" build)
  pause=${refs%% *}
  configs "$pause"
  launch containerd env PATH="$BIN:$PATH" "$BIN/containerd" --config "$RUN/etc/containerd.toml"
  wait_for containerd "$BIN/ctr" -a "$SOCK" version
  import_images

  launch kine "$BIN/kine" --listen-address 127.0.0.1:2379 --metrics-bind-address 0 \
    --endpoint "sqlite://$RUN/kine.db?_journal=WAL&cache=shared&_busy_timeout=30000"
  # --allow-privileged=true as on a real cluster (its CNI and CSI daemons
  # need it): the sandbox namespace's Pod Security is what refuses a
  # privileged pod there, and executors/k8s's admission test shows it.
  launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 --endpoint-reconciler-type=none \
    --service-cluster-ip-range=10.96.0.0/24 --token-auth-file="$RUN/pki/tokens.csv" \
    --client-ca-file="$RUN/pki/ca.crt" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --tls-cert-file="$RUN/pki/apiserver.crt" --tls-private-key-file="$RUN/pki/apiserver.key" \
    --kubelet-client-certificate="$RUN/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$RUN/pki/apiserver-kubelet-client.key" --kubelet-certificate-authority="$RUN/pki/ca.crt" \
    --kubelet-preferred-address-types=Hostname,InternalIP \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$RUN/pki/sa.pub" \
    --service-account-signing-key-file="$RUN/pki/sa.key" --profiling=false \
    --allow-privileged=true
  wait_for apiserver api_up
  for ns in default kube-system kube-public kube-node-lease; do
    kubectl_ get ns "$ns" >/dev/null 2>&1 || kubectl_ create ns "$ns" >/dev/null
  done
  launch kubelet env PATH="$BIN:$PATH" "$BIN/kubelet" --config "$RUN/etc/kubelet.yaml" \
    --kubeconfig "$RUN/pki/kubelet.kubeconfig" --root-dir "$RUN/kubelet" --hostname-override=127.0.0.1
  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$RUN/pki/scheduler.kubeconfig" \
    --authentication-kubeconfig "$RUN/pki/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/pki/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false
  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$RUN/pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$RUN/pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$RUN/pki/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$RUN/pki/sa.key" --root-ca-file="$RUN/pki/ca.crt" \
    --controllers='*,-node-ipam-controller,-persistentvolume-binder-controller,-persistentvolume-attach-detach-controller'
  wait_for "node Ready" node_ready
  wait_for "default ServiceAccount" kubectl_ -n default get sa default
  log "cluster up in $((SECONDS - began)) s (kubeconfig $KUBECONFIG_ADMIN)"
}

node_ready() {
  [ "$(kubectl_ get node 127.0.0.1 -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

wait_gone() {
  local pid i
  pid=$(pid_of "$1")
  for ((i = 0; i < 200; i++)); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

stop_component() {
  local pid
  pid=$(pid_of "$1")
  if alive "$pid"; then kill "$pid" 2>/dev/null || true; wait_gone "$1"; fi
  rm -f "$RUNDIR/$1.pid"
}

# drain deletes every pod while the kubelet still runs, so CNI DEL and the
# unmounts happen, and waits until containerd holds no container.
drain() {
  api_up || return 0
  kubectl_ delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
  local i
  for ((i = 0; i < 240; i++)); do
    [ -z "$("$BIN/ctr" -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null)" ] && return 0
    sleep 0.25
  done
  log "pods still present after 60 s; stopping anyway"
}

stop_cluster() {
  local began=$SECONDS c i
  [ -S "$SOCK" ] && drain
  for c in kube-controller-manager kube-scheduler kubelet; do stop_component "$c"; done
  # Containers the kubelet left: stop their tasks so the shims exit.
  if [ -S "$SOCK" ]; then
    for c in $("$BIN/ctr" -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
      "$BIN/ctr" -a "$SOCK" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true
    done
  fi
  for c in kube-apiserver kine containerd; do stop_component "$c"; done
  # Mounts under our trees, deepest first.
  for i in 1 2 3; do
    awk '{print $2}' /proc/self/mounts | grep -E "^($RUN|$RUNDIR|$CTRD_ROOT)(/|$)" | sort -r |
      xargs -r -n1 umount -l 2>/dev/null || true
  done
  if [ -f "$RUN/netns.before" ]; then
    ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' | grep -vxF -f "$RUN/netns.before" |
      xargs -r -n1 ip netns delete 2>/dev/null || true
  fi
  ip link delete "$BRIDGE" 2>/dev/null || true
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  restore_sysctls
  # The cluster's state goes (a new one is made at start); the binaries and
  # containerd's image store stay.
  rm -rf "$RUN" "$RUNDIR/containerd" "$RUNDIR/runc" "$RUNDIR"/*.pid "$RUNDIR"/*.cmd
  log "cluster stopped in $((SECONDS - began)) s"
}

case "$mode" in
start)
  mkdir -p "$LEASES"
  touch "$LEASES/$holder"
  exec 9>"$RUNDIR/lock"
  flock 9
  if api_up && node_ready; then
    # This checkout's images (its sandboxd) may be newer than the ones
    # the running cluster imported: hashed, so an unchanged one costs
    # nothing.
    import_images
    log "cluster already up"
  else
    start_cluster
  fi
  ;;
stop)
  mkdir -p "$LEASES"
  rm -f "$LEASES/$holder"
  exec 9>"$RUNDIR/lock"
  flock 9
  if [ "$(live_leases)" -gt 0 ]; then
    log "still held by $(ls "$LEASES" | tr '\n' ' '); leaving it up"
    exit 0
  fi
  stop_cluster
  ;;
restart)
  case "${2:-}" in
  kine | kube-apiserver | containerd | kubelet | kube-scheduler | kube-controller-manager) ;;
  *)
    echo "usage: $0 restart COMPONENT" >&2
    exit 2
    ;;
  esac
  exec 9>"$RUNDIR/lock"
  flock 9
  restart_component "$2"
  ;;
status) api_up && node_ready ;;
kubeconfig) echo "$KUBECONFIG_ADMIN" ;;
env)
  echo "SANDGATE_K8S_KUBECONFIG=$KUBECONFIG_ADMIN"
  echo "SANDGATE_K8S_IMAGE=$(cat "$RUN/sandbox-image" 2>/dev/null)"
  ;;
*)
  echo "usage: $0 start|stop [HOLDER] | restart COMPONENT | status | kubeconfig | env" >&2
  exit 2
  ;;
esac
