package aio

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// BuildImage adds a sandboxd binary to a base image with the Dockerfile of
// images/aio, as images/aio/layer.sh does, and returns the reference
// name:<hash>, where <hash> covers the base image id, the binary and the
// Dockerfile. An existing tag is reused. It uses the engine's classic
// builder, so neither BuildKit nor a registry is needed. host is the
// engine address ("" for DOCKER_HOST). Tests use it to run the sandboxd
// of the checkout they test.
func BuildImage(ctx context.Context, host, base, name string, sandboxd, dockerfile []byte) (string, error) {
	opts := []client.Opt{client.WithHostFromEnv()}
	if host != "" {
		opts = []client.Opt{client.WithHost(host)}
	}
	cli, err := client.New(opts...)
	if err != nil {
		return "", fmt.Errorf("aio: docker client: %w", err)
	}
	defer cli.Close()
	img, err := cli.ImageInspect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("aio: base image %s missing (make images): %w", base, err)
	}
	h := sha256.New()
	h.Write([]byte(img.ID))
	h.Write(sandboxd)
	h.Write(dockerfile)
	ref := name + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, dockerfile}, {"sandboxd", 0o755, sandboxd}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	res, err := cli.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{ref}, Version: build.BuilderV1, Remove: true, ForceRemove: true,
		BuildArgs: map[string]*string{"BASE": &base},
	})
	if err != nil {
		return "", fmt.Errorf("aio: build %s: %w", ref, err)
	}
	out, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("aio: build %s failed: %s", ref, truncate(string(out), 2000))
	}
	return ref, nil
}
