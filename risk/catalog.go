package risk

// def is the fixed level and message of one built-in pattern id.
type def struct {
	level Level
	msg   string
}

// Levels follow one rule, so the policy can reason about them:
//   - CRITICAL: destroys the host or hands it to someone else right away
//     (rm -rf /, fork bomb, mkfs/dd to a device, curl|sh, /dev/tcp reverse
//     shells, decoded payloads that are executed).
//   - HIGH: arbitrary process, network socket, native code or code
//     evaluation, and every form of name obfuscation (the only reason to
//     build "ev"+"al" is to defeat a check like this one).
//   - MEDIUM: reaches outside the sandbox's intent but is common in honest
//     code: HTTP clients, dynamic imports, writes or deletes outside the
//     working directory, sudo, secrets paths, literal eval.
//   - LOW: informational; any code that is not proven SAFE is LOW anyway.
//
// Ids are stable: <lang>.<family>.<name> for language patterns and
// obfuscation.<name> for language-independent text checks. Admin rules and
// the Rego policy match on them; never rename one.
var catalog = buildCatalog(sharedDefs, pythonDefs, bashDefs, jsDefs)

func buildCatalog(parts ...map[string]def) map[string]def {
	m := make(map[string]def, 160)
	for _, p := range parts {
		for id, d := range p {
			m[id] = d
		}
	}
	for _, lang := range []string{"python", "js"} {
		for name, d := range shellPayloadDefs {
			m[lang+".shell."+name] = def{d.level, "string contains a shell payload: " + d.msg}
		}
		for name, d := range commonDefs {
			m[lang+"."+name] = d
		}
	}
	for name, d := range commonDefs {
		m["bash."+name] = d
	}
	return m
}

var sharedDefs = map[string]def{
	"obfuscation.oversize":             {CRITICAL, "input larger than 1 MiB; not analysed"},
	"obfuscation.analysis_failed":      {CRITICAL, "the analyser failed on this input (a bug); failing closed"},
	"obfuscation.bidi_control":         {HIGH, "bidirectional control character (Trojan Source)"},
	"obfuscation.invisible_char":       {HIGH, "invisible or zero-width character"},
	"obfuscation.nfkc_identifier":      {HIGH, "identifier changes under NFKC (e.g. full-width letters)"},
	"obfuscation.non_ascii_identifier": {MEDIUM, "non-ASCII identifier or command name"},
	"obfuscation.nfkc_changed":         {LOW, "text changes under NFKC normalisation"},
	"obfuscation.invalid_utf8":         {MEDIUM, "input is not valid UTF-8"},
	"obfuscation.control_char":         {MEDIUM, "unexpected control character (NUL, lone CR, escape...)"},
	"obfuscation.long_line":            {MEDIUM, "line longer than 1000 characters"},
	"obfuscation.encoded_blob":         {MEDIUM, "long base64 or hex blob"},
	"obfuscation.char_code_density":    {MEDIUM, "many chr()/fromCharCode/\\x/\\u escapes"},
}

// commonDefs exist in every language, prefixed by the language.
var commonDefs = map[string]def{
	"secrets.sensitive_path": {MEDIUM, "refers to a credentials or system secrets path"},
	"escape.docker_socket":   {HIGH, "refers to the Docker socket"},
}

// shellPayloadDefs are shell payloads; in bash they have their own ids,
// in Python and JavaScript strings they are reported as <lang>.shell.<name>.
var shellPayloadDefs = map[string]def{
	"rm_rf_root":      {CRITICAL, "recursive delete of / or $HOME"},
	"fork_bomb":       {CRITICAL, "fork bomb"},
	"mkfs":            {CRITICAL, "filesystem creation on a device"},
	"dd_device":       {CRITICAL, "dd writing to a block device"},
	"curl_pipe_shell": {CRITICAL, "download piped into a shell or interpreter"},
	"dev_tcp":         {CRITICAL, "/dev/tcp or /dev/udp network redirection"},
	"reverse_shell":   {CRITICAL, "reverse shell (nc -e, socat exec, sh -i)"},
	"base64_exec":     {CRITICAL, "decoded payload piped into a shell"},
}

var pythonDefs = map[string]def{
	"python.process.subprocess":             {HIGH, "subprocess spawns processes"},
	"python.process.os_system":              {HIGH, "os.system/popen/exec*/spawn*/fork"},
	"python.process.pty":                    {HIGH, "pty.spawn spawns a shell"},
	"python.process.multiprocessing":        {MEDIUM, "multiprocessing forks workers"},
	"python.net.socket":                     {HIGH, "raw network sockets"},
	"python.net.http_client":                {MEDIUM, "HTTP/FTP/SMTP client"},
	"python.ffi.ctypes":                     {HIGH, "ctypes/cffi native code access"},
	"python.eval.exec":                      {HIGH, "exec/eval/compile of a non-literal"},
	"python.eval.exec_literal":              {MEDIUM, "exec/eval/compile of a string literal"},
	"python.eval.code_object":               {HIGH, "builds code or function objects directly"},
	"python.eval.code_module":               {MEDIUM, "interactive interpreter module (code/codeop)"},
	"python.import.dynamic":                 {MEDIUM, "dynamic import (__import__, importlib, load_module)"},
	"python.reflect.getattr_dynamic":        {HIGH, "getattr/setattr with a computed or dangerous name"},
	"python.reflect.getattr":                {LOW, "getattr/setattr with a literal name"},
	"python.reflect.builtins":               {MEDIUM, "imports the builtins module"},
	"python.reflect.globals":                {MEDIUM, "globals()/locals()/vars() namespace access"},
	"python.introspection.subclasses":       {HIGH, "__subclasses__ traversal"},
	"python.introspection.dunder_traversal": {HIGH, "dunder traversal (__globals__, __builtins__, __mro__...)"},
	"python.introspection.frame":            {HIGH, "frame introspection (_getframe, f_globals...)"},
	"python.introspection.gc":               {HIGH, "gc object graph walking"},
	"python.deser.pickle":                   {HIGH, "pickle-style deserialisation executes code"},
	"python.deser.marshal":                  {HIGH, "marshal loads code objects"},
	"python.fs.delete":                      {MEDIUM, "deletes files or trees"},
	"python.fs.delete_root":                 {CRITICAL, "deletes / or a system tree"},
	"python.fs.write_outside_cwd":           {MEDIUM, "writes a file outside the working directory"},
	"python.fs.write_system":                {HIGH, "writes a system or credentials file"},
	"python.priv.setuid":                    {MEDIUM, "changes process uid/gid"},
	"python.obfuscation.base64_exec":        {CRITICAL, "decoded (base64/hex/rot13/zlib) payload executed"},
	"python.obfuscation.string_concat_name": {HIGH, "string concatenation builds a dangerous name"},
	"python.obfuscation.source_encoding":    {HIGH, "non-UTF-8 source encoding declaration"},
}

var bashDefs = map[string]def{
	"bash.fs.rm_rf_root":               {CRITICAL, "recursive delete of / or $HOME"},
	"bash.dos.fork_bomb":               {CRITICAL, "fork bomb"},
	"bash.disk.mkfs":                   {CRITICAL, "filesystem creation or wipe on a device"},
	"bash.disk.dd_device":              {CRITICAL, "dd writing to a block device"},
	"bash.disk.write_device":           {CRITICAL, "redirect or write to a block device"},
	"bash.net.curl_pipe_shell":         {CRITICAL, "download piped into a shell or interpreter"},
	"bash.net.dev_tcp":                 {CRITICAL, "/dev/tcp or /dev/udp network redirection"},
	"bash.net.reverse_shell":           {CRITICAL, "reverse shell (nc -e, socat exec, sh -i)"},
	"bash.obfuscation.base64_exec":     {CRITICAL, "decoded payload executed by a shell"},
	"bash.net.netcat":                  {HIGH, "netcat/socat raw network tool"},
	"bash.net.http_client":             {MEDIUM, "HTTP client (curl/wget)"},
	"bash.net.remote_shell":            {MEDIUM, "remote login or copy (ssh/scp/rsync/telnet/ftp)"},
	"bash.priv.sudo":                   {MEDIUM, "privilege escalation (sudo/su/doas/pkexec)"},
	"bash.eval.eval":                   {HIGH, "eval of a string"},
	"bash.eval.source_dynamic":         {MEDIUM, "source of a computed, remote or stdin path"},
	"bash.process.shell_c":             {MEDIUM, "nested shell with -c"},
	"bash.process.interpreter_inline":  {MEDIUM, "inline interpreter code (python -c, perl -e, node -e...)"},
	"bash.process.detach":              {MEDIUM, "detaches a process (nohup/setsid/disown/at)"},
	"bash.process.kill":                {MEDIUM, "kills processes (kill -9 -1, pkill, killall)"},
	"bash.system.shutdown":             {HIGH, "shutdown/reboot/halt"},
	"bash.persist.cron":                {HIGH, "persistence (cron, systemd, shell rc, authorized_keys)"},
	"bash.escape.container":            {HIGH, "container or namespace escape tool (docker, nsenter, chroot)"},
	"bash.fs.write_outside_cwd":        {MEDIUM, "writes outside the working directory"},
	"bash.fs.write_system":             {HIGH, "writes a system or credentials file"},
	"bash.fs.delete_outside_cwd":       {MEDIUM, "deletes outside the working directory"},
	"bash.fs.chmod_dangerous":          {HIGH, "chmod/chown of system paths, 777 or setuid"},
	"bash.pkg.install":                 {MEDIUM, "package installation (apt, pip, npm...)"},
	"bash.obfuscation.var_command":     {HIGH, "command name comes from a variable expansion"},
	"bash.obfuscation.quote_split":     {HIGH, "command name split by quotes or backslashes"},
	"bash.obfuscation.glob_command":    {HIGH, "command name is a glob"},
	"bash.obfuscation.brace_command":   {HIGH, "command name built by brace expansion"},
	"bash.obfuscation.encoded_command": {HIGH, "command name built from $'\\x..' escapes"},
	"bash.obfuscation.ansi_c_quote":    {MEDIUM, "$'...' quoting with hex/octal/unicode escapes"},
	"bash.obfuscation.ifs":             {HIGH, "${IFS} used as a separator"},
}

var jsDefs = map[string]def{
	"js.process.child_process":            {HIGH, "child_process spawns processes"},
	"js.process.runtime_spawn":            {HIGH, "Deno/Bun process spawning"},
	"js.process.worker":                   {MEDIUM, "worker_threads/cluster"},
	"js.eval.eval":                        {HIGH, "eval of a non-literal"},
	"js.eval.eval_literal":                {MEDIUM, "eval of a string literal"},
	"js.eval.function_ctor":               {HIGH, "Function constructor or .constructor call"},
	"js.eval.timer_string":                {HIGH, "setTimeout/setInterval with a code string"},
	"js.vm.vm_module":                     {HIGH, "vm module runs code in new contexts"},
	"js.import.dynamic":                   {MEDIUM, "dynamic import() or computed require()"},
	"js.import.module_loader":             {HIGH, "internal module loader (mainModule, Module._load, createRequire)"},
	"js.ffi.native_binding":               {HIGH, "native bindings (process.binding, dlopen, ffi)"},
	"js.net.socket":                       {HIGH, "raw sockets (net, dgram, tls)"},
	"js.net.http_client":                  {MEDIUM, "HTTP client (http, fetch, axios...)"},
	"js.fs.delete":                        {MEDIUM, "deletes files or trees"},
	"js.fs.write_outside_cwd":             {MEDIUM, "writes a file outside the working directory"},
	"js.fs.write_system":                  {HIGH, "writes a system or credentials file"},
	"js.reflect.global_computed":          {HIGH, "computed property on the global object"},
	"js.reflect.global_object":            {MEDIUM, "global object access (globalThis/global/window)"},
	"js.reflect.proto_pollution":          {MEDIUM, "prototype manipulation (__proto__, setPrototypeOf)"},
	"js.debug.inspector":                  {MEDIUM, "inspector module"},
	"js.obfuscation.base64_exec":          {CRITICAL, "decoded (atob/Buffer base64/hex) payload executed"},
	"js.obfuscation.string_concat_name":   {HIGH, "string concatenation builds a dangerous name"},
	"js.obfuscation.unicode_escape_ident": {HIGH, "identifier written with \\u escapes"},
	"js.obfuscation.jsfuck":               {HIGH, "JSFuck-style []/!+ encoding"},
}
