package executortest

import (
	"fmt"
	"strings"
	"testing"
)

// program is one test program in every language. Texts are fmt templates
// where the test needs to fill in values.
type program map[string]string

func (p program) get(t *testing.T, lang string, args ...any) string {
	t.Helper()
	text, ok := p[lang]
	if !ok {
		t.Skipf("no program for language %q", lang)
	}
	if len(args) == 0 {
		return text
	}
	return fmt.Sprintf(text, args...)
}

var progStdoutStderr = program{
	"python":     "import sys\nprint('to-stdout')\nprint('to-stderr', file=sys.stderr)\n",
	"bash":       "echo to-stdout\necho to-stderr >&2\n",
	"javascript": "console.log('to-stdout');\nconsole.error('to-stderr');\n",
}

var progExit = program{
	"python":     "import sys\nprint('exiting')\nsys.exit(%d)\n",
	"bash":       "echo exiting\nexit %d\n",
	"javascript": "console.log('exiting');\nprocess.exit(%d);\n",
}

// progFail fails the way a buggy program does, and says so on stderr.
var progFail = program{
	"python":     "raise ValueError('boom-failure')\n",
	"bash":       "echo boom-failure >&2\nfalse\n",
	"javascript": "throw new Error('boom-failure');\n",
}

// progRepeat writes %[1]d copies of "0123456789" to stdout in one go.
var progRepeat = program{
	"python":     "import sys\nsys.stdout.write('0123456789' * %d)\n",
	"bash":       "s=''\nfor ((i = 0; i < %d; i++)); do s+=0123456789; done\nprintf '%%s' \"$s\"\n",
	"javascript": "process.stdout.write('0123456789'.repeat(%d));\n",
}

// progFlood writes %[1]d MiB of 'x' to stdout as fast as it can.
var progFlood = program{
	"python":     "import sys\nb = b'x' * (1 << 20)\nfor _ in range(%d):\n    sys.stdout.buffer.write(b)\n",
	"bash":       "head -c $((%d << 20)) /dev/zero | tr '\\0' x\n",
	"javascript": "const b = Buffer.alloc(1 << 20, 'x');\nfor (let i = 0; i < %d; i++) process.stdout.write(b);\n",
}

// progTree starts three marked sleeps: a plain background child, a child
// in a new session (setsid), and a double-forked daemon in a new session;
// then it prints "spawned" and sleeps. Each %[n]s is a marker used as the
// sleep's duration ("1000.<digits>") so the test can find it in
// /proc/<pid>/cmdline whatever the PID namespace.
var progTree = program{
	"python": `import os, subprocess, time
subprocess.Popen(["sleep", "%[1]s"])
subprocess.Popen(["sleep", "%[2]s"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "%[3]s"])
    os._exit(0)
print("spawned", flush=True)
time.sleep(1000)
`,
	"bash": `sleep %[1]s &
setsid sleep %[2]s &
( setsid sleep %[3]s & ) &
echo spawned
sleep 1000
`,
	"javascript": `const cp = require("child_process");
cp.spawn("sleep", ["%[1]s"], { stdio: "ignore" });
cp.spawn("sleep", ["%[2]s"], { stdio: "ignore", detached: true }).unref();
cp.spawn("sh", ["-c", "setsid sleep %[3]s &"], { stdio: "ignore" });
console.log("spawned");
setTimeout(() => {}, 1000000);
`,
}

var progEnv = program{
	"python":     "import os\nfor k, v in os.environ.items():\n    print(f'{k}={v}')\n",
	"bash":       "env\n",
	"javascript": "for (const [k, v] of Object.entries(process.env)) console.log(k + '=' + v);\n",
}

// progCwd reads in.txt and writes it upper-cased to out.txt, both relative.
var progCwd = program{
	"python":     "data = open('in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint('done')\n",
	"bash":       "tr a-z A-Z < in.txt > out.txt\necho done\n",
	"javascript": "const fs = require('fs');\nfs.writeFileSync('out.txt', fs.readFileSync('in.txt', 'utf8').toUpperCase());\nconsole.log('done');\n",
}

// progPaths prints its cwd and HOME, then fails on an absolute path into
// the workspace so the error message (and a traceback) carries it.
var progPaths = program{
	"python":     "import os\nprint(os.getcwd())\nprint(os.environ['HOME'])\nprint(os.path.abspath('x.txt'))\nopen(os.path.join(os.getcwd(), 'missing.txt'))\n",
	"bash":       "pwd\necho \"$HOME\"\necho \"$PWD/x.txt\"\ncat \"$PWD/missing.txt\"\n",
	"javascript": "const path = require('path');\nconsole.log(process.cwd());\nconsole.log(process.env.HOME);\nconsole.log(path.resolve('x.txt'));\nrequire('fs').readFileSync(path.join(process.cwd(), 'missing.txt'));\n",
}

const unicodeLine = "héllo wörld ✓ 日本語 🎉 Ω"

// progBinary writes unicodeLine to stdout and the bytes 0..255 to stderr.
var progBinary = program{
	"python":     "import sys\nsys.stdout.write(%q + '\\n')\nsys.stdout.flush()\nsys.stderr.buffer.write(bytes(range(256)))\n",
	"bash":       "printf '%%s\\n' %q\nprintf '" + octalBytes() + "' >&2\n",
	"javascript": "process.stdout.write(%q + '\\n');\nprocess.stderr.write(Buffer.from([...Array(256).keys()]));\n",
}

// octalBytes is a printf format producing the bytes 0..255.
func octalBytes() string {
	var b strings.Builder
	for i := range 256 {
		fmt.Fprintf(&b, "\\%03o", i)
	}
	return strings.ReplaceAll(b.String(), "%", "%%")
}

// allBytes is what progBinary writes to stderr.
func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TreeProgram is progTree in lang with markers m[0..2], for an executor's
// own tests of the same property (a warm or a zygote run, say).
func TreeProgram(t *testing.T, lang string, m []string) string {
	t.Helper()
	return progTree.get(t, lang, m[0], m[1], m[2])
}
