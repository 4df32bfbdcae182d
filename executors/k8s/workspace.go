package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// The pod's /workspace is an emptyDir: the pod holds the session's files,
// and no node shares a mount with the gateway. The gateway's workspace
// (what the workspace API serves and the spill files are read from) is
// kept a copy of it: before a run, a host workspace that changed since
// the last copy (an upload through the API) replaces the pod's; after a
// run, the pod's replaces the host's. Both copies are tar streams through
// the apiserver's exec; what the pod sends is treated as hostile: it is
// written under an os.Root of the host workspace (no path or symlink can
// leave it), only directories, regular files and symlinks, permission
// bits only (no setuid), owned by the session's uid, and at most
// WorkspaceMB in all.

// podExec runs argv in the sandbox container with stdin and stdout.
func (e *Executor) podExec(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout io.Writer) error {
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.cfg.Namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: containerName, Command: argv, Stdin: stdin != nil, Stdout: stdout != nil, Stderr: true,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.rc, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	var stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: &limited{w: &stderr, n: 4096}})
	if err != nil {
		return fmt.Errorf("exec %s: %w (%s)", argv[0], err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// push replaces the pod's workspace with the host's when the host's
// changed since the last copy.
func (sb *sandbox) push(ctx context.Context, dir string) error {
	snap, err := snapshot(dir)
	if err != nil {
		return err
	}
	if snap == sb.snap {
		return nil
	}
	if sb.fresh && emptyDir(dir) {
		// A pod placed for this session starts with an empty workspace:
		// nothing to copy, and nothing to copy back unless the run writes.
		sb.snap, sb.fresh, sb.podFP = snap, false, aiowire.EmptyFingerprint
		return nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, dir)) }()
	err = sb.e.podExec(ctx, sb.name, []string{"/bin/sh", "-c",
		"cd /workspace && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && exec tar -x --no-same-owner -f -"}, pr, nil)
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("k8s: copy the workspace into the pod: %w", err)
	}
	sb.snap, sb.fresh, sb.podFP = snap, false, ""
	return nil
}

// emptyDir: dir holds no entry (or cannot be read: then the push copies
// what it can read, as before).
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// pullChanged pulls the pod's workspace when its fingerprint changed
// since the last sync (a run that wrote nothing costs no copy). sandboxd
// computes the fingerprint (GET /v1/workspace/fingerprint) on the open
// tunnel, far cheaper than an exec through the apiserver; the pod's
// answer only decides whether its workspace is copied back, so a lying
// answer only keeps the session's own host copy stale. A fingerprint
// that cannot be had (an unreadable tree) means a copy.
func (sb *sandbox) pullChanged(ctx context.Context, dir string, uid, gid int) error {
	fp, err := sb.client.WorkspaceFingerprint(ctx)
	if err == nil && fp.Fingerprint != "" && fp.Fingerprint == sb.podFP {
		return nil
	}
	if err := sb.pull(ctx, dir, uid, gid); err != nil {
		return err
	}
	sb.podFP = fp.Fingerprint // "" when unknown: the next run copies again
	return nil
}

// pull replaces the host workspace's contents with the pod's.
func (sb *sandbox) pull(ctx context.Context, dir string, uid, gid int) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := sb.e.podExec(ctx, sb.name, []string{"tar", "-c", "-f", "-", "-C", "/workspace", "."}, nil, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := extract(pr, dir, uid, gid, int64(sb.e.cfg.WorkspaceMB)<<20)
	if err == nil {
		_, _ = io.Copy(io.Discard, pr) // tar's padding after the end marker
	}
	pr.CloseWithError(errors.New("extract ended"))
	if xerr := <-errc; err == nil && xerr != nil {
		err = xerr
	}
	if err != nil {
		return fmt.Errorf("k8s: copy the workspace from the pod: %w", err)
	}
	sb.snap, err = snapshot(dir)
	return err
}

// writeTar writes dir's tree (not following symlinks) as a tar stream.
func writeTar(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, fifos, devices: not workspace content
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = p, 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|noFollow, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, fi.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extract writes the tar stream r into dir (see the package comment on
// what it accepts) and then removes what dir holds that r did not name.
func extract(r io.Reader, dir string, uid, gid int, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	seen := map[string]bool{".": true}
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == "" {
			continue
		}
		if !fs.ValidPath(name) {
			return fmt.Errorf("refusing path %q", h.Name)
		}
		total += h.Size
		if total > maxBytes {
			return fmt.Errorf("the workspace exceeds %d MiB", maxBytes>>20)
		}
		if err := extractOne(root, tr, h, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = root.Lchown(name, uid, gid)
		seen[name] = true
	}
	return prune(root, seen)
}

func extractOne(root *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	perm := fs.FileMode(h.Mode) & fs.ModePerm
	if fi, err := root.Lstat(name); err == nil {
		keep := (h.Typeflag == tar.TypeDir && fi.IsDir()) || (h.Typeflag == tar.TypeReg && fi.Mode().IsRegular())
		if !keep {
			if err := root.RemoveAll(name); err != nil {
				return err
			}
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, perm|0o700); err != nil {
			return err
		}
		return root.Chmod(name, perm|0o700)
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noFollow, perm)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return root.Chmod(name, perm)
	case tar.TypeSymlink:
		return root.Symlink(h.Linkname, name)
	}
	return nil // hard links, devices, fifos: not copied
}

// prune removes what the host workspace holds that the pod's does not.
func prune(root *os.Root, seen map[string]bool) error {
	var gone []string
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if seen[p] {
			return nil
		}
		gone = append(gone, p)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range gone {
		if err := root.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// snapshot summarizes dir's tree (names, types, sizes, modes, mtimes):
// equal snapshots mean nothing changed between two copies.
func snapshot(dir string) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00%d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("k8s: read the workspace: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
