package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// probe sends one request of op in session and records it like the
// workload's, under the fault being injected.
func (k *faultKit) probe(ctx context.Context, op loadOp, session string) answer {
	t0 := time.Now()
	a, streamed := op.do(ctx, k.gw, session)
	k.rec.addAnswer("probe:"+op.name, session, t0, k.rec.activeFault(), a, streamed)
	return a
}

// untilOK repeats op until it succeeds or limit passes, and returns how
// long that took and the answers that were not a success, by code.
func (k *faultKit) untilOK(ctx context.Context, op loadOp, session string, limit time.Duration) (time.Duration, map[string]int, error) {
	t0 := time.Now()
	seen := map[string]int{}
	for time.Since(t0) < limit && ctx.Err() == nil {
		a := k.probe(ctx, op, session)
		if a.ok() && a.Err == nil {
			return time.Since(t0), seen, nil
		}
		seen[answerKey(a)]++
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(t0), seen, fmt.Errorf("%s not back after %s: %v", op.name, limit, seen)
}

// watchReadiness polls /readyz every 100 ms for executor kind until the
// returned function is called, which returns the changes it saw, timed
// from since: where a recovery's time went.
func (k *faultKit) watchReadiness(ctx context.Context, kind string, since time.Time) func() string {
	wctx, stop := context.WithCancel(ctx)
	var changes []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for wctx.Err() == nil {
			e := k.readyz(wctx)[kind]
			if now := strings.TrimSpace(e.Status + " " + e.Reason); now != last && wctx.Err() == nil {
				changes = append(changes, fmt.Sprintf("%.2fs %s", time.Since(since).Seconds(), now))
				last = now
			}
			sleepCtx(wctx, 100*time.Millisecond)
		}
	}()
	return func() string {
		stop()
		<-done
		return strings.Join(changes, " → ")
	}
}

func answerKey(a answer) string {
	if a.Status == 0 {
		return "transport error"
	}
	if a.Status/100 == 2 && a.Err != nil {
		return "2xx but " + a.Err.Error()
	}
	return fmt.Sprintf("%d %s", a.Status, a.Code)
}

func (k *faultKit) session(name string) string {
	k.seq++
	s := fmt.Sprintf("%s-%s-%d", faultSessionTag, name, k.seq)
	k.fxSessions = append(k.fxSessions, s)
	return s
}

// endSessions deletes the sessions the fault made (purging their
// workspaces), so that their warm containers and aio instances do not
// crowd the workers' out of the pools.
func (k *faultKit) endSessions(ctx context.Context) {
	for _, s := range k.fxSessions {
		k.probe(ctx, loadOp{name: "session.delete", do: func(ctx context.Context, g *soakGateway, s string) (answer, bool) {
			return g.call(ctx, agentToken, "DELETE", "/v1/sessions/"+s+"?purge=true", "", nil, nil), false
		}}, s)
	}
	k.fxSessions = nil
}

var (
	dockerProbe = runOp("docker", codeDocker, 0, false, "docker", "1\n")
	aioProbe    = runOp("aio", codeSafe, 0, true, "aio", "1\n")
	safeProbe   = runOp("subprocess", codeSafe, 0, false, "subprocess", "1\n")
	writeProbe  = fileOp("file.write", "PUT", "/files/content?path=probe.txt", "text/plain", []byte("probe\n"), "")
)

// injectEngineRestart stops the private engine (scripts/dockerd.sh
// stop), keeps it down 2 s under load, starts it again, and measures the
// time from the engine answering to the first docker run that succeeds.
func injectEngineRestart(ctx context.Context, k *faultKit) (string, float64, error) {
	t0 := time.Now()
	if err := k.env.engine.stop(ctx); err != nil {
		return "", 0, err
	}
	stopped := time.Since(t0)
	sess := k.session("engine")
	down := k.probe(ctx, dockerProbe, sess) // while down: a clear error, not internal
	sleepCtx(ctx, 2*time.Second)
	if err := k.env.engine.start(ctx); err != nil {
		return "", 0, err
	}
	for !k.env.engine.ping() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	up := time.Now()
	why := k.watchReadiness(ctx, "docker", up)
	rec, seen, err := k.untilOK(ctx, dockerProbe, sess, 60*time.Second)
	whyDocker := why()
	aioRec := time.Duration(0)
	if k.execs["aio"] && err == nil {
		aioRec, _, _ = k.untilOK(ctx, aioProbe, sess, 60*time.Second)
		aioRec += rec
	}
	detail := fmt.Sprintf("engine stop took %.1fs; docker run while down: %s; engine answered after %.1fs down; first docker run ok %.2fs after that (aio %.2fs); answers before: %v; docker in /readyz meanwhile: %s",
		stopped.Seconds(), answerKey(down), time.Since(t0).Seconds()-time.Since(up).Seconds()-stopped.Seconds(), rec.Seconds(), aioRec.Seconds(), seen, whyDocker)
	return detail, rec.Seconds(), err
}

// injectContainerKill starts a long docker run (streamed, so its request
// id is known at once), docker-kills its container from outside, and
// checks that the client gets a clear answer and the session runs again.
func injectContainerKill(ctx context.Context, k *faultKit) (string, float64, error) {
	sess := k.session("kill")
	code := "import os, time\nprint('up', flush=True)\ntime.sleep(30)\nprint(1)"
	done := make(chan answer, 1)
	go func() { done <- k.probe(ctx, streamOp("docker long run", code, 0), sess) }()
	var victim string
	for deadline := time.Now().Add(30 * time.Second); victim == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		cs, _ := k.env.containers(ctx)
		for _, c := range cs {
			if c.Executor == "docker" && strings.Contains(c.Session, sess) && c.State == "running" {
				victim = c.ID
			}
		}
	}
	if victim == "" {
		<-done
		return "", 0, errors.New("no container appeared for the long run")
	}
	time.Sleep(time.Second)
	killed := time.Now()
	if _, err := k.env.engine.docker(ctx, "kill", victim); err != nil {
		<-done
		return "", 0, err
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(45 * time.Second):
		return "", 0, errors.New("the run whose container was killed got no answer in 45 s")
	}
	answered := time.Since(killed)
	rec, _, err := k.untilOK(ctx, dockerProbe, sess, 30*time.Second)
	return fmt.Sprintf("killed %s; the client got %s %.2fs later; next run in the session ok after %.2fs",
		victim, answerKey(a), answered.Seconds(), rec.Seconds()), 0, err
}

// aioBoundTo reports whether aio container c, one started ahead of its
// session (no session label: labels are fixed at create), is bound to
// session sess, by the session record of its state directory.
func (k *faultKit) aioBoundTo(c containerInfo, sess string) bool {
	if c.Session != "" || c.Slot == "" || strings.ContainsAny(c.Slot, "/.") {
		return false
	}
	raw, err := os.ReadFile(filepath.Join(k.env.aioState, c.Slot, "session"))
	if err != nil {
		return false
	}
	var rec struct {
		Session string `json:"session"`
	}
	return json.Unmarshal(raw, &rec) == nil && strings.Contains(rec.Session, sess)
}

// aioVictim makes sure session sess has an aio instance and returns its
// container.
func (k *faultKit) aioVictim(ctx context.Context, sess string) (containerInfo, error) {
	if _, _, err := k.untilOK(ctx, aioProbe, sess, 60*time.Second); err != nil {
		return containerInfo{}, err
	}
	cs, err := k.env.containers(ctx)
	if err != nil {
		return containerInfo{}, err
	}
	for _, c := range cs {
		if c.Executor == "aio" && c.State == "running" && (strings.Contains(c.Session, sess) || k.aioBoundTo(c, sess)) {
			return c, nil
		}
	}
	var labels []string
	for _, c := range cs {
		labels = append(labels, c.Executor+":"+c.Session)
	}
	return containerInfo{}, fmt.Errorf("no aio container labelled with session %s among %v", sess, labels)
}

// injectAIORemoved removes a session's aio container under it (docker
// rm -f) and checks that the session's next aio run works.
func injectAIORemoved(ctx context.Context, k *faultKit) (string, float64, error) {
	// The pool may evict the instance itself (an idle one, to make room)
	// just as the fault picks it: then the fault picks again.
	var c containerInfo
	var err error
	sess := ""
	for try := 0; try < 3; try++ {
		sess = k.session("aio")
		if c, err = k.aioVictim(ctx, sess); err != nil {
			return "", 0, err
		}
		if _, err = k.env.engine.docker(ctx, "rm", "-f", c.ID); err == nil {
			break
		}
	}
	if err != nil {
		return "", 0, err
	}
	rec, seen, err := k.untilOK(ctx, aioProbe, sess, 60*time.Second)
	return fmt.Sprintf("removed %s; next aio run ok after %.2fs; answers before: %v", c.ID, rec.Seconds(), seen), 0, err
}

// injectSandboxdKill kills the sandboxd server inside a session's aio
// container (SIGKILL to its host pid) and checks the next aio run.
func injectSandboxdKill(ctx context.Context, k *faultKit) (string, float64, error) {
	sess := k.session("sandboxd")
	c, err := k.aioVictim(ctx, sess)
	if err != nil {
		return "", 0, err
	}
	out, err := k.env.engine.docker(ctx, "top", c.ID, "-eo", "pid,args")
	if err != nil {
		return "", 0, err
	}
	var pids []int
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasSuffix(f[1], "sandboxd") && f[2] == "serve" {
			if p, err := strconv.Atoi(f[0]); err == nil {
				pids = append(pids, p)
			}
		}
	}
	if len(pids) == 0 {
		return "", 0, fmt.Errorf("no sandboxd serve in %s: %s", c.ID, out)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	rec, seen, err := k.untilOK(ctx, aioProbe, sess, 60*time.Second)
	return fmt.Sprintf("killed sandboxd serve %v in %s; next aio run ok after %.2fs; answers before: %v", pids, c.ID, rec.Seconds(), seen), 0, err
}

// injectWorkspaceFull fills the workspaces' filesystem, sends a write and
// a run under it, and empties it again.
func injectWorkspaceFull(ctx context.Context, k *faultKit) (string, float64, error) {
	sess := k.session("wsfull")
	if _, _, err := k.untilOK(ctx, writeProbe, sess, 30*time.Second); err != nil {
		return "", 0, err
	}
	if err := k.wsFS.fill(); err != nil {
		return "", 0, err
	}
	write := k.probe(ctx, fileOp("file.write", "PUT", "/files/content?path=big.txt", "text/plain", make([]byte, 64<<10), ""), sess)
	run := k.probe(ctx, safeProbe, sess)
	sleepCtx(ctx, 3*time.Second)
	if err := k.wsFS.drain(); err != nil {
		return "", 0, err
	}
	rec, _, err := k.untilOK(ctx, writeProbe, sess, 30*time.Second)
	return fmt.Sprintf("write while full: %s; run while full: %s; write ok %.2fs after space came back",
		answerKey(write), answerKey(run), rec.Seconds()), 0, err
}

// injectGatewayKill sends the gateway SIGKILL and starts it again on the
// same address and data; the workload's clients retry meanwhile.
func injectGatewayKill(ctx context.Context, k *faultKit) (string, float64, error) {
	t0 := time.Now()
	k.gw.kill()
	if err := k.gw.start(gatewayRestartTO); err != nil {
		return "", 0, err
	}
	healthy := time.Since(t0)
	rec, seen, err := k.untilOK(ctx, safeProbe, k.session("gw"), 30*time.Second)
	return fmt.Sprintf("restarted and healthy after %.2fs; first run ok %.2fs later; answers before: %v",
		healthy.Seconds(), rec.Seconds(), seen), 0, err
}

// injectPolicyBroken drops a broken Rego file into the watched policy
// directory, reloads (rejected; the last good policy stays in force),
// checks that runs still work, then removes it and reloads again.
func injectPolicyBroken(ctx context.Context, k *faultKit) (string, float64, error) {
	bad := filepath.Join(k.policy, "sandgate", "exec", "zz_soak_broken.rego")
	if err := os.WriteFile(bad, []byte("package sandgate.exec\n\nthis is { not rego\n"), 0o644); err != nil {
		return "", 0, err
	}
	reload := k.gw.call(ctx, adminToken, "POST", "/v1/policy/reload", "", nil, http.Header{})
	sess := k.session("policy")
	run := k.probe(ctx, safeProbe, sess)
	sleepCtx(ctx, 3*time.Second)
	if err := os.Remove(bad); err != nil {
		return "", 0, err
	}
	good := k.gw.call(ctx, adminToken, "POST", "/v1/policy/reload", "", nil, http.Header{})
	detail := fmt.Sprintf("broken reload: %s; run meanwhile: %s; good reload: %s", answerKey(reload), answerKey(run), answerKey(good))
	switch {
	case reload.ok():
		return detail, 0, errors.New("the broken policy was accepted")
	case !run.ok():
		return detail, 0, errors.New("runs failed while a broken policy file was in the directory")
	case !good.ok():
		return detail, 0, errors.New("the good policy was not reloaded")
	}
	return detail, 0, nil
}

// injectAuditFull fills the filesystem of the audit database and sends a
// run that would leave a marker in the workspace: it must either be
// answered with a record, or refused without running (fail closed).
func injectAuditFull(ctx context.Context, k *faultKit) (string, float64, error) {
	sess := k.session("auditfull")
	if _, _, err := k.untilOK(ctx, safeProbe, sess, 30*time.Second); err != nil {
		return "", 0, err
	}
	if err := k.dataFS.fill(); err != nil {
		return "", 0, err
	}
	// Marker runs until one is refused (SQLite may still find room in
	// its write-ahead log for a while), at most 15 s.
	answers := map[string]int{}
	ranUnaudited, refused := 0, 0
	// Between marker runs, bursts of cheap audited requests (listings)
	// use up the room the database still has.
	list := fileOp("file.list", "GET", "/files/list?path=/workspace", "", nil, "")
	for t0 := time.Now(); time.Since(t0) < 30*time.Second && refused < 3 && ctx.Err() == nil; {
		marker := "ran-" + randHex()
		code := fmt.Sprintf("open('/workspace/%s', 'w').write('x')\nprint(1)", marker)
		a := k.probe(ctx, runOp("marker run", code, 0, false, "", ""), sess)
		answers[answerKey(a)]++
		if !a.ok() {
			refused++
			if k.markerExists(sess, marker) {
				ranUnaudited++
			}
		}
		for range 50 {
			k.probe(ctx, list, sess)
		}
	}
	if err := k.dataFS.drain(); err != nil {
		return "", 0, err
	}
	rec, seen, err := k.untilOK(ctx, safeProbe, sess, 30*time.Second)
	detail := fmt.Sprintf("runs while full: %v; ran without a record: %d; run ok %.2fs after space came back; answers before: %v",
		answers, ranUnaudited, rec.Seconds(), seen)
	if ranUnaudited > 0 {
		return detail, 0, fmt.Errorf("%d runs ran although the audit write failed", ranUnaudited)
	}
	return detail, 0, err
}

// markerExists looks for a file the marker run would have written, in
// any workspace directory of the session.
func (k *faultKit) markerExists(sess, marker string) bool {
	found := false
	_ = filepath.WalkDir(filepath.Join(k.wsFS.dir, "ws"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == marker {
			found = true
		}
		return nil
	})
	return found
}
