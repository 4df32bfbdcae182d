// Package ctrfile reads a file of a container's root filesystem through
// the Docker Engine's archive API: what the container executors need to
// build an egress CA bundle from the image's own system roots
// (executors.EgressBundle), which the gateway cannot read from the host.
package ctrfile

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// MaxSize bounds what Read returns.
const MaxSize = 16 << 20

// Read returns the content of path in container id (created or running),
// or nil when the container has no such file.
func Read(ctx context.Context, cli *client.Client, id, path string) ([]byte, error) {
	r, err := cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s from container: %w", path, err)
	}
	defer r.Content.Close()
	tr := tar.NewReader(r.Content)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s from container: %w", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, MaxSize))
		}
	}
}
