package daytona

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/executors/output"
	"github.com/sandgate/sandgate/manager"
)

// The toolbox's process calls. executeCommand and codeRun are one
// manager.Run each (validation, risk, policy, approval, the executor the
// policy chooses, one audit record); neither streams: the SDK waits for
// the whole answer, {exitCode, result}, with a client timeout of 24 hours
// by default, so a command held for approval just waits (bounded by the
// gateway's approval.timeout). A refusal is an HTTP error the SDK raises
// as its own DaytonaError (403 DaytonaAuthorizationError for a policy or
// approval denial), whose message is sandgate's code, message and the
// policy's reasons, and whose code is sandgate's code.

// executeBody is ExecuteRequest.
type executeBody struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd"`
	Envs    map[string]string `json:"envs"`
	// Timeout is the command's time limit in seconds; 0 or none is the
	// gateway's default.
	Timeout *int `json:"timeout"`
}

// codeRunBody is CodeRunRequest.
type codeRunBody struct {
	Code     string            `json:"code"`
	Language string            `json:"language"`
	Argv     []string          `json:"argv"`
	Envs     map[string]string `json:"envs"`
	Timeout  *int              `json:"timeout"`
}

// executeResponse is ExecuteResponse; result is the command's output,
// stdout and stderr in the order they came.
type executeResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// codeRunResponse is CodeRunResponse.
type codeRunResponse struct {
	ExitCode  int              `json:"exitCode"`
	Result    string           `json:"result"`
	Artifacts codeRunArtifacts `json:"artifacts"`
}

// codeRunArtifacts carries charts, which a stateless run does not make.
type codeRunArtifacts struct {
	Charts []any `json:"charts"`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxTimeout is the longest time limit a run may ask for, as the REST
// API's timeout_s.
const maxTimeout = 3600

func timeoutOf(t *int) (int, error) {
	if t == nil || *t <= 0 {
		return 0, nil
	}
	if *t > maxTimeout {
		return 0, invalid("timeout", "must be at most 3600 seconds")
	}
	return *t, nil
}

// commandOf is the bash command line executeCommand runs: the command,
// after a cd to cwd and the exports of envs, so the code the policy
// judges, the approver sees and the audit digests is exactly what runs.
func commandOf(b executeBody) (string, error) {
	if strings.TrimSpace(b.Command) == "" {
		return "", invalid("command", "is required")
	}
	var pre []string
	if b.Cwd != "" {
		ws, _, ok := toWorkspace(b.Cwd)
		if !ok {
			return "", invalid("cwd", errOutside)
		}
		if ws != "/workspace" {
			pre = append(pre, "cd "+shellQuote(ws)+" || exit 1")
		}
	}
	keys := make([]string, 0, len(b.Envs))
	for k := range b.Envs {
		if !envName.MatchString(k) {
			return "", invalid("envs", "names must match [A-Za-z_][A-Za-z0-9_]*")
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pre = append(pre, "export "+k+"="+shellQuote(b.Envs[k]))
	}
	if len(pre) == 0 {
		return b.Command, nil
	}
	return strings.Join(pre, "\n") + "\n" + b.Command, nil
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// languageOf is the sandgate language of a codeRun's language: the
// sandbox's code-toolbox-language label, python by default.
func languageOf(l string) (string, error) {
	switch l {
	case "", "python":
		return "python", nil
	case "javascript":
		return "javascript", nil
	}
	return "", invalid("language", "python and javascript are served; "+manager.Printable(l, 32)+" is not")
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	var body executeBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	code, err := commandOf(body)
	if err != nil {
		return err
	}
	timeout, err := timeoutOf(body.Timeout)
	if err != nil {
		return err
	}
	res, err := s.run(w, r, manager.RunRequest{Kind: manager.KindExecute, Principal: sb.principal, SessionID: sb.id,
		Language: "bash", Code: code, TimeoutS: timeout, Via: sb.via})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, executeResponse{ExitCode: res.exitCode, Result: res.output})
	return nil
}

// codeRun runs code as a fresh process (Daytona's codeRun is stateless,
// like sandgate's run_code). Arguments and environment variables are not
// served: the manager's runs take neither; the code sets them itself.
func (s *Server) codeRun(w http.ResponseWriter, r *http.Request, sb *sandbox) error {
	var body codeRunBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	lang, err := languageOf(body.Language)
	if err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(body.Code) == "":
		return invalid("code", "is required")
	case len(body.Argv) > 0:
		return invalid("argv", "arguments are not served: set sys.argv in the code")
	case len(body.Envs) > 0:
		return invalid("envs", "environment variables are not served for codeRun: set them in the code (os.environ)")
	}
	timeout, err := timeoutOf(body.Timeout)
	if err != nil {
		return err
	}
	res, err := s.run(w, r, manager.RunRequest{Kind: manager.KindRunCode, Principal: sb.principal, SessionID: sb.id,
		Language: lang, Code: body.Code, TimeoutS: timeout, Via: sb.via})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, codeRunResponse{ExitCode: res.exitCode, Result: res.output, Artifacts: codeRunArtifacts{Charts: []any{}}})
	return nil
}

// ran is a finished run as Daytona answers it.
type ran struct {
	exitCode int
	output   string
}

// interleaved keeps a run's output chunks, stdout and stderr together in
// the order the executor kept them, as Daytona's combined output has
// them.
type interleaved struct {
	mu   sync.Mutex
	buf  []byte
	sent [2]int
}

func (o *interleaved) add(c output.Chunk) {
	o.mu.Lock()
	o.buf = append(o.buf, c.Data...)
	o.sent[c.Stream] += len(c.Data)
	o.mu.Unlock()
}

// combined is the run's output: the chunks in order when they carried it
// all, else stdout then stderr from the result (a backend that could not
// stream).
func (o *interleaved) combined(stdout, stderr string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sent[output.Stdout] == len(stdout) && o.sent[output.Stderr] == len(stderr) {
		return string(o.buf)
	}
	return stdout + stderr
}

// run takes req through the pipeline. The server's write timeout is
// lifted while it runs (a held or long command answers once, at its end)
// and set again for the answer.
func (s *Server) run(w http.ResponseWriter, r *http.Request, req manager.RunRequest) (ran, error) {
	defer longRun(w)()
	ctx := r.Context()
	req.RequestID = manager.RequestIDFrom(ctx)
	var out interleaved
	req.OnOutput = out.add
	res, err := s.runSafely(ctx, req)
	if err != nil {
		return ran{}, err
	}
	text := out.combined(res.Result.Stdout, res.Result.Stderr)
	if res.Result.TimedOut {
		text += "\nsandgate: the command was killed at its time limit\n"
	}
	if res.Result.Truncated {
		note := "\nsandgate: the output was cut at the gateway's cap"
		if res.Result.OutputPath != "" {
			note += "; all of it is in " + res.Result.OutputPath
		}
		text += note + "\n"
	}
	return ran{exitCode: res.Result.ExitCode, output: text}, nil
}

// runSafely is manager.Run with a panic turned into an error.
func (s *Server) runSafely(ctx context.Context, req manager.RunRequest) (res *manager.RunResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.ErrorContext(ctx, "daytona run panic", "request_id", req.RequestID, "panic", v)
			res, err = nil, errcode.New(errcode.Internal, "internal error")
		}
	}()
	return s.deps.Manager.Run(ctx, req)
}

// answerWindow is how long the answer of a long run may take to write,
// once it is ready.
const answerWindow = time.Minute

// longRun lifts the server's write timeout for a request that answers
// only when its run ends (a command held for approval, or running for up
// to an hour), and returns the function that bounds the answer's write.
func longRun(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	return func() { _ = rc.SetWriteDeadline(time.Now().Add(answerWindow)) }
}
