package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// Pooled session sandboxes. A session sandbox (session.go) is a container
// created for the session on its first command: a create and a start on
// the path of the first output of every E2B sandbox. The pool keeps them
// ready too, as a shape of its own (shape.sandbox), made on the first
// sandbox a shape asks for and sized by demand like any other: a pooled
// container of no session with docker-init as PID 1, whose boot step
// (poolBootPrefix) waits for its claim, then takes on the session's
// identity and, instead of reading a program, says it is ready and
// sleeps, as a sandbox created for the session does. Its commands are
// execs like any sandbox's.
//
// The claim waits for that word before the sandbox is the session's: the
// first command could otherwise start while the boot step still runs as
// root (under gVisor, before it has bound the workspace), and a kill of
// that command's tree could take the boot step with it.

// sandboxReadyWord is what a pooled sandbox writes once it is the
// session's.
const sandboxReadyWord = "sandgate-sandbox-ready"

// sandboxSleepScript replaces a pooled run's boot script ($3 of
// poolBootPrefix) in a pooled sandbox.
const sandboxSleepScript = "printf '%s\\n' " + sandboxReadyWord + "\nexec sleep infinity"

// sandboxReadyTimeout bounds the wait for a claimed sandbox's word.
const sandboxReadyTimeout = 10 * time.Second

// claimSandbox hands the session a pooled sandbox of shape sh, claimed
// and ready, or nil when none is (the caller creates one).
func (p *sandboxPool) claimSandbox(ctx context.Context, sh shape) *box {
	b := p.claim(ctx, sh)
	if b == nil {
		return nil
	}
	if err := awaitWord(b, sandboxReadyWord, sandboxReadyTimeout); err != nil {
		p.e.log.Warn("pooled session sandbox: not ready after its claim", "container", shortID(b.id), "err", err.Error())
		p.e.discard(b)
		p.lost.Add(1)
		return nil
	}
	// Nothing travels over the container's own streams from now on.
	b.conn.Close()
	b.conn = client.HijackedResponse{}
	return b
}

// awaitWord reads b's output stream until word appears on it.
func awaitWord(b *box, word string, timeout time.Duration) error {
	conn, r := b.conn.Conn, b.conn.Reader
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := stdcopy.StdCopy(pw, pw, r)
		pw.CloseWithError(err) // nil: EOF
	}()
	defer func() {
		_ = conn.SetReadDeadline(time.Now()) // ends the copier's read
		pr.Close()                           // and its write
		<-done
	}()
	var seen bytes.Buffer
	buf := make([]byte, 256)
	for seen.Len() <= 4096 {
		n, err := pr.Read(buf)
		seen.Write(buf[:n])
		if bytes.Contains(seen.Bytes(), []byte(word)) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w (output %.200q)", err, seen.String())
		}
	}
	return errors.New("no ready word in the sandbox's first 4 KiB of output")
}
