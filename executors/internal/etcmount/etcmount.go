// Package etcmount gives the container executors (docker, gvisor, aio)
// one description of how a sandbox gets its /etc/hosts and
// /etc/resolv.conf (executors.NetworkFiles): read-only bind mounts of the
// files a directory of the gateway's holds, over the engine's own.
package etcmount

import (
	"maps"
	"path/filepath"
	"slices"

	"github.com/moby/moby/api/types/mount"

	"github.com/sandgate/sandgate/executors"
)

// Mounts returns the read-only bind mounts of executors.NetworkFiles from
// dir (written there by executors.WriteNetworkFiles), in name order.
func Mounts(dir string) []mount.Mount {
	var ms []mount.Mount
	for _, name := range slices.Sorted(maps.Keys(executors.NetworkFiles)) {
		ms = append(ms, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(dir, name), Target: "/etc/" + name,
			ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	return ms
}
