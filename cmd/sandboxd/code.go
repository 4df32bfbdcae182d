package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Code execution limits of /v1/code/execute. sandboxd allows longer runs
// than upstream (300 s) because the gateway's policy may grant them.
const (
	codeDefaultTimeout = 30
	codeMaxTimeout     = 3600
)

type codeExecReq struct {
	Language  *string       `json:"language"`
	Code      *string       `json:"code"`
	Timeout   *int          `json:"timeout"`
	Cwd       *string       `json:"cwd"`
	Stateful  bool          `json:"stateful"`
	SessionID *string       `json:"session_id"`
	XSandgate *runExtension `json:"x_sandgate"`
}

type codeOutput struct {
	OutputType string                     `json:"output_type"`
	Name       *string                    `json:"name,omitempty"`
	Text       *string                    `json:"text,omitempty"`
	Data       map[string]json.RawMessage `json:"data,omitempty"`
	Ename      *string                    `json:"ename,omitempty"`
	Evalue     *string                    `json:"evalue,omitempty"`
	Traceback  []string                   `json:"traceback,omitempty"`
}

type codeResult struct {
	Language  string       `json:"language"`
	Status    string       `json:"status"`
	Outputs   []codeOutput `json:"outputs"`
	Code      string       `json:"code"`
	Stdout    *string      `json:"stdout"`
	Stderr    *string      `json:"stderr"`
	ExitCode  *int         `json:"exit_code"`
	Traceback []string     `json:"traceback"`
	SessionID *string      `json:"session_id"`
	XSandgate *runOutput   `json:"x_sandgate,omitempty"`
}

func (s *server) handleCodeExecute(w http.ResponseWriter, r *http.Request) {
	var req codeExecReq
	hold, ok := s.decodeHeld(w, r, &req, "language", "code")
	if !ok {
		return
	}
	verr := &validationError{}
	literal(verr, "language", req.Language, "python", "javascript")
	if req.Timeout != nil && (*req.Timeout < 1 || *req.Timeout > codeMaxTimeout) {
		verr.items = append(verr.items, validationItem{Type: "value_error", Loc: []any{"body", "timeout"},
			Msg: "Value error, timeout must be between 1 and 3600 seconds", Input: *req.Timeout})
	}
	if !check(w, verr) {
		return
	}
	timeout := codeDefaultTimeout
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if req.Stateful {
		if hold != nil && !released(w, hold) { // a cell is not staged: it waits here
			return
		}
		s.handleStateful(w, r, req, time.Duration(timeout)*time.Second)
		return
	}
	dir := s.cfg.Workspace
	if req.Cwd != nil && *req.Cwd != "" {
		if err := checkDir(*req.Cwd); err != nil {
			writeFail(w, http.StatusBadRequest, "Invalid cwd: "+err.Error(), nil)
			return
		}
		dir = *req.Cwd
	}
	// A plain AIO call: the program is read from stdin (no argv size
	// limit, no file left in the workspace, and no -I for python so that
	// modules written to the workspace can be imported, as in a
	// notebook). The gateway's runs name a program file instead
	// (stageProgram).
	spec := jobSpec{dir: dir, stdin: *req.Code, label: *req.Code, hardTimeout: time.Duration(timeout) * time.Second}
	if *req.Language == "python" {
		spec.argv = []string{"python3", "-u", "-"}
	} else {
		spec.argv = []string{"node", "-"}
	}
	applyExtension(&spec, req.XSandgate)
	path, cleanup, staged, err := stageProgram(s.cfg.CodeDir, req.XSandgate, *req.Language, *req.Code)
	if err != nil {
		writeFail(w, http.StatusInternalServerError, "Cannot stage the program: "+err.Error(), nil)
		return
	}
	if staged { // the gateway's run: the program file, as in every backend
		spec.argv, spec.stdin = programArgv(*req.Language, path), ""
		defer cleanup()
	}
	if *req.Language == "javascript" {
		spec.argv, spec.headroomMB = withHeapCap(spec.argv, spec.limits), nodeHeadroomMB
	}
	rl := newRelay(req.XSandgate)
	spec.tap, spec.hold = rl.tap(), hold
	j, err := s.jobs.start(spec)
	if err != nil {
		startFailed(w, "Failed to start "+*req.Language, err)
		return
	}
	finished := false
	if rl != nil {
		finished, _ = rl.run(w, r, j)
	} else {
		finished = waitJob(j, 0, r.Context().Done())
	}
	if !finished {
		s.jobs.kill(j, statusKilled) // the caller went away: the run dies with the request
	}
	<-j.done
	status, code := j.state()
	out, outTrunc := j.out.Bytes(stdout)
	errb, errTrunc := j.out.Bytes(stderr)
	res := codeResult{Language: *req.Language, Code: *req.Code, Stdout: ptr(string(out)), Stderr: ptr(string(errb)),
		ExitCode: code, Outputs: []codeOutput{}}
	switch {
	case status == statusTimedOut:
		res.Status = "timeout"
	case status == statusCompleted && code != nil && *code == 0:
		res.Status = "ok"
	default:
		res.Status = "error"
	}
	if len(out) > 0 {
		res.Outputs = append(res.Outputs, codeOutput{OutputType: "stream", Name: ptr("stdout"), Text: ptr(string(out))})
	}
	if len(errb) > 0 {
		res.Outputs = append(res.Outputs, codeOutput{OutputType: "stream", Name: ptr("stderr"), Text: ptr(string(errb))})
	}
	if res.Status == "error" && *req.Language == "python" {
		if tb := pythonTraceback(string(errb)); tb != nil {
			res.Traceback = tb
			ename, evalue, _ := strings.Cut(tb[len(tb)-1], ": ")
			res.Outputs = append(res.Outputs, codeOutput{OutputType: "error", Ename: ptr(ename), Evalue: ptr(evalue), Traceback: tb})
		}
	}
	if req.XSandgate != nil {
		res.XSandgate = s.runOutput(j, out, errb, outTrunc, errTrunc)
	}
	if rl != nil {
		rl.finish(res)
		return
	}
	writeOK(w, res)
}

// pythonTraceback returns the lines of the last traceback in stderr.
func pythonTraceback(stderr string) []string {
	i := strings.LastIndex(stderr, "Traceback (most recent call last):")
	if i < 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(stderr[i:], "\n"), "\n")
}
