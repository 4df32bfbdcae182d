package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A sandboxd started with --await-claim is an AIO instance started ahead
// of its session (executors/aio's pool, issue 34). It runs as root with
// CAP_SETUID, CAP_SETGID and CAP_SETPCAP only and serves one request:
// POST /v1/claim with the session's key (X-AIO-API-Key) and its identity,
// {"uid", "gid", "home"}. It answers the claim, then becomes the session's
// sandboxd in place: it clears the bounding, ambient and inheritable
// capability sets, takes the gid (its only supplementary group, as the
// engine gives an exec's user) and the uid, which clears the rest, and
// execs itself as `sandboxd serve` with the key and the home, handing
// over its listening socket, so that the gateway's next request waits in
// the socket's backlog instead of failing. The result is the process a
// `docker exec` of sandboxd as the session's uid started before, without
// the exec (about 40 ms) and sandboxd's start on the claim's path. Any
// failure after the answer ends the process, and with it the instance,
// which the gateway then replaces.

// claimIdentity is the body of an identity claim.
type claimIdentity struct {
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home"`
}

// awaitIdentity serves ln until a claim arrives, then execs the claimed
// sandboxd in workspace (args are serve's own, keyEnv the variable it
// reads its key from). It returns only on a failure.
func awaitIdentity(ln net.Listener, args []string, keyEnv, workspace string, log *slog.Logger) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	failed := make(chan error, 2)
	var claimed atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/claim", func(w http.ResponseWriter, r *http.Request) {
		id, key, msg := readClaim(r)
		if msg != "" {
			writeFail(w, http.StatusBadRequest, msg, nil)
			return
		}
		if claimed.Swap(true) {
			writeFail(w, http.StatusConflict, "this sandbox is already claimed", nil)
			return
		}
		argv, env, err := claimedCommand(exe, args, keyEnv, key, id, ln)
		if err == nil {
			err = answerAndExec(w, argv, env, id, workspace)
		}
		failed <- err // answerAndExec returns only on a failure
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"detail": "Invalid or missing API key"})
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		// A claim closes the listener (claimedCommand): not a failure.
		if err := hs.Serve(ln); !claimed.Load() {
			failed <- err
		}
	}()
	log.Info("sandboxd awaiting its claim")
	return <-failed
}

// readClaim reads a claim's key and identity; msg says what is wrong.
func readClaim(r *http.Request) (claimIdentity, string, string) {
	key := presentedKey(r)
	if len(key) < 16 {
		return claimIdentity{}, "", "a claim carries the new API key (at least 16 characters) as X-AIO-API-Key"
	}
	var id claimIdentity
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&id); err != nil {
		return claimIdentity{}, "", "a claim's body is {\"uid\", \"gid\", \"home\"}"
	}
	if id.UID <= 0 || id.GID <= 0 || id.UID > 1<<31-2 || id.GID > 1<<31-2 {
		return claimIdentity{}, "", "a claim's uid and gid are positive (never root)"
	}
	if id.Home != "" && (!strings.HasPrefix(id.Home, "/") || strings.ContainsRune(id.Home, 0)) {
		return claimIdentity{}, "", "a claim's home is an absolute path"
	}
	return id, key, ""
}

// claimedCommand is the claimed sandboxd's command line and environment:
// serve's arguments without --await-claim, the inherited listener, the
// home; the key in keyEnv, HOME / (what an exec as a uid without a
// passwd entry had).
func claimedCommand(exe string, args []string, keyEnv, key string, id claimIdentity, ln net.Listener) ([]string, []string, error) {
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		return nil, nil, errors.New("an identity claim needs a unix: listener")
	}
	f, err := ul.File() // a duplicate, close-on-exec
	if err != nil {
		return nil, nil, err
	}
	// This process accepts no more: a connection it took now would die
	// with the exec. The socket stays, on the duplicate, for the
	// claimed sandboxd; its backlog holds what arrives meanwhile.
	ul.SetUnlinkOnClose(false)
	_ = ul.Close()
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return nil, nil, err
	}
	argv := []string{exe, "serve"}
	for _, a := range args {
		if a != "--await-claim" && a != "-await-claim" {
			argv = append(argv, a)
		}
	}
	argv = append(argv, "--listen", "fd:"+strconv.Itoa(fd), "--api-key-env", keyEnv)
	if id.Home != "" {
		argv = append(argv, "--home", id.Home)
	}
	env := []string{"HOME=/", keyEnv + "=" + key}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && k != keyEnv {
			env = append(env, kv)
		}
	}
	return argv, env, nil
}

// answerAndExec takes the identity on this thread, enters workspace (as
// that identity: the workspace mounted since the process started is the
// session's), answers the claim on the hijacked connection, and execs
// argv. It returns only on a failure (before the answer, the claim gets
// a 500).
func answerAndExec(w http.ResponseWriter, argv, env []string, id claimIdentity, workspace string) error {
	runtime.LockOSThread() // the exec takes this thread's capability sets
	err := takeIdentity(id.UID, id.GID)
	if err == nil {
		err = os.Chdir(workspace)
	}
	if err != nil {
		writeFail(w, http.StatusInternalServerError, "the claim could not take its identity", nil)
		return fmt.Errorf("take the claimed identity: %w", err)
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	const body = `{"success":true,"message":"Operation successful","data":null,"hint":null}`
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	if err := buf.Flush(); err != nil {
		return err
	}
	_ = conn.Close()
	return syscall.Exec(argv[0], argv, env)
}

// takeIdentity clears this thread's bounding, ambient and inheritable
// capability sets (it holds CAP_SETPCAP), sets the groups to gid alone,
// the gid and the uid (every thread: that clears the permitted and
// effective sets), and checks the result in /proc/thread-self/status.
func takeIdentity(uid, gid int) error {
	for c := 0; ; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) && c > 0 {
				break // past the kernel's last capability
			}
			return fmt.Errorf("bounding set: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("inheritable set: %w", err)
	}
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return err
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return err
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return err
	}
	return checkIdentity(uid, gid)
}

// checkIdentity reads /proc/thread-self/status: the uid and gid in every
// slot, the gid as the only group, no capability in any set.
func checkIdentity(uid, gid int) error {
	st, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	want := map[string]string{
		"Uid":    strings.Repeat(strconv.Itoa(uid)+"\t", 3) + strconv.Itoa(uid),
		"Gid":    strings.Repeat(strconv.Itoa(gid)+"\t", 3) + strconv.Itoa(gid),
		"Groups": strconv.Itoa(gid),
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
	}
	for line := range strings.SplitSeq(string(st), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if w, known := want[k]; ok && known {
			if strings.TrimSpace(v) != w {
				return fmt.Errorf("%s is %q, want %q", k, strings.TrimSpace(v), w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("status lacks %d fields", len(want))
	}
	return nil
}
