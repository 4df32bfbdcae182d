package executortest

import (
	"embed"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goldens are compiled in: a backend's suite may run from a copy of its
// test binary elsewhere (the rootless re-run does), not from the source
// tree.
//
//go:embed testdata/fingerprint.*.golden
var goldens embed.FS

// updateFingerprint rewrites testdata/fingerprint.<lang>.golden from the
// backend under test: go test -run 'TestConformance/Fingerprint' -update-fingerprint.
var updateFingerprint = flag.Bool("update-fingerprint", false, "rewrite the executortest fingerprint golden files")

// progFingerprint prints what a program can observe about the environment
// it runs in, one fact per line, with nothing that legitimately varies
// between runs (ids, pids, times). DESIGN.md §6: the policy picks the
// isolation, and code must not be able to tell which one it got except by
// what it is forbidden to do. Every backend compares its output with the
// same golden file, so a difference between executors fails the suite of
// the one that differs.
var progFingerprint = program{
	"python": `import os, sys, pwd, grp, socket, locale
def user():
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return "-"
def group():
    try:
        return grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        return "-"
def nameservers():
    try:
        return [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
    except OSError:
        return []
print("argv0", sys.argv[0].replace(REQ, "<id>"))
print("argv", sys.argv[1:])
print("file", __file__.replace(REQ, "<id>"))
print("cwd", os.getcwd())
print("executable", sys.executable)
print("flags isolated=%d unbuffered=%s dont_write_bytecode=%d" % (sys.flags.isolated, not sys.stdout.line_buffering and sys.stdout.write_through, sys.flags.dont_write_bytecode))
print("path", [p for p in sys.path if p])
print("nonroot", os.getuid() != 0 and os.getuid() == os.geteuid())
print("user", user(), "group", group())
print("home", os.path.expanduser("~"))
print("hostname", socket.gethostname())
print("localhost", sorted({a[4][0] for a in socket.getaddrinfo("localhost", None)}))
print("nameservers", nameservers())
print("encoding", sys.stdout.encoding, locale.getpreferredencoding(False))
print("umask", oct(os.umask(0o22)))
print("stdin", repr(sys.stdin.read()))
for k in sorted(os.environ):
    print("env", k, "=", os.environ[k].replace(REQ, "<id>"))
for d in ["/tmp", "/workspace", "/home", "/root", "/var/tmp", "/run", "/dev/shm", "/usr/local/bin"]:
    print("dir", d, os.path.isdir(d), os.access(d, os.W_OK))
for d in ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty", "/dev/full"]:
    print("dev", d, os.path.exists(d))
`,
	"bash": `echo "argv0 ${0//$REQ/<id>}"
echo "cwd $(pwd)"
echo "shell $SHELL bash $BASH"
echo "user $(id -un 2>/dev/null || echo -) group $(id -gn 2>/dev/null || echo -)"
echo "whoami $(whoami 2>/dev/null || echo -)"
echo "home ~ = $(cd ~ && pwd)"
echo "hostname $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)"
echo "umask $(umask)"
echo "stdin [$(cat)]"
echo "tty $(tty 2>/dev/null)"
echo "opts $-"
env | sed "s/$REQ/<id>/g" | grep -v '^_=' | LC_ALL=C sort | sed 's/^/env /'
`,
	"javascript": `const os = require('os');
const clean = s => String(s).split(REQ).join('<id>');
console.log('argv0', clean(process.argv[1]));
console.log('argv', JSON.stringify(process.argv.slice(2)));
console.log('main', clean(require.main && require.main.filename));
console.log('cwd', process.cwd());
console.log('execPath', process.execPath);
let user = '-';
try { user = os.userInfo().username; } catch (e) { user = 'error ' + e.code; }
console.log('user', user);
console.log('homedir', os.homedir());
console.log('hostname', os.hostname());
console.log('execArgv', JSON.stringify(process.execArgv.filter(a => !a.startsWith('--max-old-space-size'))));
for (const k of Object.keys(process.env).sort()) console.log('env', k, '=', clean(process.env[k]));
`,
}

// fingerprintPrelude defines REQ (the run's request id) in each language,
// so the program can replace it with a placeholder.
var fingerprintPrelude = map[string]string{
	"python":     "REQ = %q\n",
	"bash":       "REQ=%q\n",
	"javascript": "const REQ = %q;\n",
}

// testFingerprint: see progFingerprint.
func (s *suite) testFingerprint(t *testing.T, lang string) {
	if !s.h.DataStack {
		t.Skip("the golden file is the runtime root's environment; the backend does not run on it here")
	}
	body := progFingerprint.get(t, lang)
	r := s.newRun(t, lang, "")
	r.spec.Code = strings.Replace(fingerprintPrelude[lang], "%q", `"`+r.spec.RequestID+`"`, 1) + body
	res := r.do(t.Context())
	if res.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	name := "fingerprint." + lang + ".golden"
	if *updateFingerprint {
		_, src, _, _ := runtime.Caller(0)
		if err := os.WriteFile(filepath.Join(filepath.Dir(src), "testdata", name), []byte(res.Stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := goldens.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatalf("golden: %v", err)
	}
	golden := "executors/executortest/testdata/" + name
	if diff := s.unexcepted(t, lineDiff(string(want), res.Stdout)); diff != "" {
		t.Errorf("the environment differs from the other executors' (%s; - golden, + this executor):\n%s", golden, diff)
	}
}

// unexcepted drops the diff lines the harness excepts, logging why.
func (s *suite) unexcepted(t *testing.T, diff string) string {
	var b strings.Builder
	for line := range strings.Lines(diff) {
		fact := line[2:] // after "- " or "+ "
		if reason, ok := s.exception(fact); ok {
			t.Logf("known difference %q: %s", strings.TrimSpace(fact), reason)
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

func (s *suite) exception(fact string) (string, bool) {
	for prefix, reason := range s.h.FingerprintExceptions {
		if strings.HasPrefix(fact, prefix) {
			return reason, true
		}
	}
	return "", false
}

// lineDiff lists the lines only in want (-) and only in got (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW, inG := map[string]int{}, map[string]int{}
	for _, l := range w {
		inW[l]++
	}
	for _, l := range g {
		inG[l]++
	}
	var b strings.Builder
	for _, l := range w {
		if inG[l] == 0 {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if inW[l] == 0 {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
