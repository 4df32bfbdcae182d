package subprocess

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/process"
)

// handoffFD is the descriptor on which a warm interpreter's bootstrap talks
// to the gateway: one end of a socketpair, inherited through the launch
// chain. It is high so the interpreter's own start-up descriptors (Node
// opens about 15) get the same numbers as in a cold run, and the bootstrap
// closes it before the program starts.
//
// The protocol is three messages: the bootstrap writes "R" when the
// interpreter is ready; the gateway writes the code file's path relative
// to the workspace and "\n"; the bootstrap writes "G" once nothing can stop
// it from running the program any more, closes the descriptor and runs it.
// A bootstrap that reads end-of-file before the path exits 0 without a
// word. The init step keeps its own copy of the descriptor, so the gateway
// sees end-of-file only when the whole tree is gone.
const handoffFD = 100

// pythonBoot runs as `python3 -I -u -c pythonBoot` and then executes the
// code file the way `python3 -I -u <file>` (CPython's
// _PyRun_SimpleFileObject) does: in the real __main__ module, whose
// namespace gets exactly the keys, in the same order, a file run gives
// (__file__, __cached__ and a SourceFileLoader), with the same sys.argv
// and sys.orig_argv, the code compiled under its absolute path (what
// CPython ≥ 3.9 uses for a script), and the I/O flushed, the exception
// printed, __file__ removed and the exit status chosen in the same order.
// It binds no name of its own while the program runs: everything lives in
// objects reachable only from the with statement. sys.path needs nothing:
// -I (safe_path) adds no script directory either way.
//
// An uncaught exception leaves through the bootstrap's frame, which would
// add a "<string>" line to the traceback: a one-shot sys.excepthook,
// installed only on that path and gone before anything else can see it,
// removes those lines and then does what PyErr_Print does with the user's
// own hook (including "Error in sys.excepthook"). SystemExit and
// KeyboardInterrupt reach CPython's own top level unchanged, so exit codes
// and the SIGINT exit are CPython's.
const pythonBoot = pythonBootStart + `    _o.write(100, b"R")
    _m = b""
    while _m[-1:] != b"\n":
        _k = _o.read(100, 4096)
        if not _k:
            _o._exit(0)
        _m += _k
    _r = _o.fsdecode(_m[:-1])
` + pythonMainSetup + pythonBootEnd

// pythonBootStart opens a boot program: the two modules every bootstrap
// uses, bound to names the program's globals lose before it runs.
const pythonBootStart = `import sys as _s, os as _o
try:
`

// pythonMainSetup turns the interpreter's __main__ into the one a file run
// of _r (the code file, relative to the cwd) would have, and builds _w,
// the context manager the program runs in. It is indented for the body of
// pythonBootStart's try statement.
const pythonMainSetup = `    _c = _o.getcwd()
    _n = _r if _r.startswith("/") else _c + _r if _c.endswith("/") else _c + "/" + _r
    _g = globals()
    _s.argv[0] = _r
    if hasattr(_s, "orig_argv"):
        _s.orig_argv[-2:] = [_r]
    _g["__file__"] = _n
    _g["__cached__"] = None
    _g["__loader__"] = _s.modules["_frozen_importlib"]._bootstrap_external.SourceFileLoader("__main__", _n)

    class _W:
        def __enter__(self):
            pass

        def prepare(self, sys=_s, g=_g, n=_n):
            try:
                with open(n, "rb") as f:
                    src = f.read()
            except OSError as e:
                sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n" % (sys.orig_argv[0], n, e.errno, e.strerror))
                raise SystemExit(2)
            for k in [k for k in g if not (k.startswith("__") and k.endswith("__"))]:
                del g[k]
            return compile(src, n, "exec", dont_inherit=True), g

        def __exit__(self, t, v, tb, sys=_s, g=_g):
            def flush_io():
                for name in ("stderr", "stdout"):
                    try:
                        getattr(sys, name).flush()
                    except BaseException:
                        pass

            def forget_file():
                g.pop("__file__", None)
                g.pop("__cached__", None)

            flush_io()
            if t is None:
                forget_file()
                return
            if issubclass(t, SystemExit):
                return
            hook = getattr(sys, "excepthook", None)

            def excepthook(t, v, tb):
                if hook is None:
                    del sys.excepthook
                else:
                    sys.excepthook = hook
                while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
                    tb = tb.tb_next
                if v is not None:
                    v.__traceback__ = tb
                sys.last_traceback = tb
                try:
                    if hook is None:
                        sys.stderr.write("sys.excepthook is missing\n")
                        sys.__excepthook__(t, v, tb)
                        return
                    try:
                        hook(t, v, tb)
                    except SystemExit:
                        raise
                    except BaseException as e:
                        e.__traceback__ = e.__traceback__.tb_next
                        sys.stderr.write("Error in sys.excepthook:\n")
                        sys.__excepthook__(type(e), e, e.__traceback__)
                        sys.stderr.write("\nOriginal exception was:\n")
                        sys.__excepthook__(t, v, tb)
                finally:
                    forget_file()

            sys.excepthook = excepthook

    _w = _W()
`

// pythonBootEnd says "G" on descriptor 100 and runs the program in _w at
// the top level of the -c program, where a file run's code would run.
const pythonBootEnd = `    _o.write(100, b"G")
    _o.close(100)
except BaseException:
    _o._exit(0)
with _w:
    exec(*_w.prepare())
`

// bashBoot runs as `bash --noprofile --norc -c bashBoot sandgate-warm
// <env> <bash>`. Bash cannot run a script "as the script" from inside an
// already started shell (source changes $0, BASH_SOURCE, $-, return and
// BASH_EXECUTION_STRING), so the warm part for bash is the launch chain
// only: at hand-off the waiting shell execs env -i, which execs bash with
// exactly the cold argv and exactly the environment this process was
// started with (read back from /proc/self/environ, so PWD and the order
// the init shell gave it are kept, and bash's own SHLVL and _ are not).
const bashBoot = `mapfile -d '' e </proc/self/environ || exit 0
printf R >&100 || exit 0
IFS= read -r -u 100 p || exit 0
printf G >&100 || exit 0
exec "$1" -i -- "${e[@]}" "$2" --noprofile --norc "$p" 100>&-`

// nodeBootTemplate is the --require preload of a warm node process, written
// to the executor's warm directory with the main-entry directory filled in.
// Node 20 resolves the main entry point after the preloads ran, from the
// path given on the command line: the warm process is started with a
// placeholder path in that directory, the gateway points it (a symlink) at
// the code file at hand-off, and node's loader, which resolves symlinks
// for the main module, then loads the code file as the main module from
// its real path, exactly as a cold `node <file>`: require.main,
// module.filename, __dirname, the module format decision (package.json
// "type") and the stack frames below the program are the cold ones. The
// preload puts back what the command line changed: process.argv[1],
// process.execArgv (in worker threads too), process._preload_modules and
// its own require.cache and path-cache entries. It loads no module a cold
// start does not load (fs and path are loaded by node's own start-up).
const nodeBootTemplate = `'use strict';
{
  const fs = require('fs');
  const path = require('path');
  const Module = module.constructor;
  if (path.dirname(process.argv[1] || '') === MAIN_DIR) {
    try {
      fs.writeSync(100, 'R');
      const buf = Buffer.alloc(4096);
      let msg = '';
      while (!msg.endsWith('\n')) {
        const n = fs.readSync(100, buf, 0, buf.length, null);
        if (n === 0) process.reallyExit(0);
        msg += buf.toString('utf8', 0, n);
      }
      process.argv[1] = path.resolve(msg.slice(0, -1));
      fs.writeSync(100, 'G');
      fs.closeSync(100);
    } catch {
      process.reallyExit(0);
    }
  }
  if (process.execArgv.at(-2) === '--require') process.execArgv.splice(-2, 2);
  Object.defineProperty(process, '_preload_modules', { writable: false, configurable: true, enumerable: true, value: [] });
  delete require.cache[__filename];
  for (const k of Object.keys(Module._pathCache)) {
    if (Module._pathCache[k] === __filename) delete Module._pathCache[k];
  }
}
`

// nodeBoot is the executor's warm directory for node: the preload and the
// directory of placeholder main paths. It is made on first use, and made
// again if something (a /tmp cleaner) removed it.
type nodeBoot struct {
	mu      sync.Mutex
	parent  string // Config.WarmDir
	dir     string // root-owned, 0711
	preload string // dir/boot.js, 0644
	mainDir string // dir/main, 0711: the placeholders
	failed  error  // why node warm-up is off, once decided for good
}

// ensure returns the preload and placeholder directory, making them when
// missing. checkIDs, when set, requires every directory above to be
// traversable by anyone (sandbox uids differ per session).
func (b *nodeBoot) ensure(checkIDs bool) (preload, mainDir string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return "", "", b.failed
	}
	if b.dir != "" {
		if _, err := os.Stat(b.preload); err == nil {
			return b.preload, b.mainDir, nil
		}
		_ = os.RemoveAll(b.dir)
		b.dir = ""
	}
	parent, err := filepath.EvalSymlinks(b.parent)
	if err != nil {
		b.failed = fmt.Errorf("warm dir: %w", err)
		return "", "", b.failed
	}
	if checkIDs {
		if err := checkWorldTraversable(parent); err != nil {
			b.failed = err
			return "", "", err
		}
	}
	dir, err := os.MkdirTemp(parent, "sandgate-warm-")
	if err != nil {
		return "", "", fmt.Errorf("warm dir: %w", err)
	}
	mainDir = filepath.Join(dir, "main")
	preload = filepath.Join(dir, "boot.js")
	quoted, _ := json.Marshal(path.Join(preloadMount, filepath.Base(mainDir))) // as runs see it
	err = errors.Join(
		os.Chmod(dir, 0o711),
		os.WriteFile(preload, []byte(strings.Replace(nodeBootTemplate, "MAIN_DIR", string(quoted), 1)), 0o644),
		os.Mkdir(mainDir, 0o711),
	)
	if err == nil {
		err = errors.Join(os.Chmod(preload, 0o644), os.Chmod(mainDir, 0o711))
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("warm dir: %w", err)
	}
	b.dir, b.preload, b.mainDir = dir, preload, mainDir
	return preload, mainDir, nil
}

// current is the warm directory if it exists, for the run's root to bind
// (at preloadMount); "" before node first warmed.
func (b *nodeBoot) current() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dir
}

// remove deletes the warm directory (Close).
func (b *nodeBoot) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir = ""
	}
}

// checkWorldTraversable checks dir and every directory above it have the
// search bit for others.
func checkWorldTraversable(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("warm dir: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("warm dir: %s (mode %#o) is not traversable by the sandbox uids", p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

// warmArgs returns the argv of a warm interpreter for lang, or ok=false
// when lang cannot be warmed here. preload and placeholder are node's
// --require file and main path.
func (e *Executor) warmArgs(lang, interp string, lim executors.Limits, preload, placeholder string) (argv []string, ok bool) {
	switch lang {
	case executors.LangPython:
		return []string{interp, "-I", "-u", "-c", pythonBoot}, true
	case executors.LangBash:
		// env -i takes words with a '=' as assignments until the first
		// without one: that must be the interpreter.
		if e.envTool == "" || strings.Contains(interp, "=") {
			return nil, false
		}
		return []string{interp, "--noprofile", "--norc", "-c", bashBoot, "sandgate-warm", e.envTool, interp}, true
	case executors.LangJavaScript:
		return []string{interp, process.NodeHeapArg(lim.MemoryMB), "--require", preload, placeholder}, true
	}
	return nil, false
}
