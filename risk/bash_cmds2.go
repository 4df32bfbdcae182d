package risk

import "strings"

// classifyOther holds the denylist for ordinary commands.
func (w *bashWalker) classifyOther(name string, words []int, line int32) {
	switch {
	case name == "rm" || name == "shred" || name == "unlink" || name == "rmdir" || name == "srm":
		w.remove(name, words, line)
	case strings.HasPrefix(name, "mkfs") || name == "mke2fs" || name == "mkswap" || name == "wipefs" ||
		(name == "fdisk" || name == "sfdisk" || name == "parted") && w.argPrefix(words, "/dev/"):
		w.hit("bash.disk.mkfs", line)
	case name == "dd":
		w.dd(words, line)
	case name == "nc" || name == "ncat" || name == "netcat" || name == "socat":
		w.hit("bash.net.netcat", line)
		if w.hasArg(words, "-e", "-c") || name == "socat" && w.argContains(words, "exec:") {
			w.hit("bash.net.reverse_shell", line)
		}
	case name == "ssh" || name == "scp" || name == "sftp" || name == "telnet" || name == "ftp" ||
		name == "rsync" && w.argContains(words, ":"):
		w.hit("bash.net.remote_shell", line)
	case name == "kill" && w.hasArg(words, "-1") || name == "pkill" || name == "killall":
		w.hit("bash.process.kill", line)
	case name == "shutdown" || name == "reboot" || name == "halt" || name == "poweroff" ||
		name == "init" && w.hasArg(words, "0", "6") || name == "systemctl" && w.hasArg(words, "poweroff", "reboot", "halt"):
		w.hit("bash.system.shutdown", line)
	case name == "crontab" && !w.hasArg(words, "-l"):
		w.hit("bash.persist.cron", line)
	case name == "at" || name == "batch":
		w.hit("bash.process.detach", line)
	case name == "docker" || name == "podman" || name == "ctr" || name == "crictl" || name == "kubectl" && w.hasArg(words, "exec"):
		w.hit("bash.escape.container", line)
	case name == "chmod" || name == "chown" || name == "chgrp":
		w.chmod(words, line)
	case isPackageManager(name) && w.hasArg(words, "install", "add", "i", "-S", "get"):
		w.hit("bash.pkg.install", line)
	case name == "tee" || name == "cp" || name == "mv" || name == "install" || name == "ln" || name == "touch" ||
		name == "mkdir" || name == "truncate" || name == "rsync":
		w.writes(name, words)
	}
}

func isPackageManager(n string) bool {
	switch n {
	case "apt", "apt-get", "yum", "dnf", "apk", "pip", "pip3", "npm", "yarn", "pnpm", "gem", "cargo", "go",
		"brew", "pacman", "zypper", "conda", "uv", "pipx", "npx":
		return true
	}
	return false
}

var rootTargets = setOf("/", "/*", "~", "~/", "~/*", "$home", "${home}", "$home/", "${home}/", "$home/*",
	"/home", "/etc", "/usr", "/var", "/bin", "/boot", "/lib", "/root", "/opt", "/srv", "/sys", "/proc", "/dev",
	"/home/*", "/etc/*", "/usr/*", "/var/*")

func (w *bashWalker) remove(name string, words []int, line int32) {
	recursive := name == "rm" && (w.hasFlagLetter(words, 'r') || w.hasFlagLetter(words, 'R') || w.hasArg(words, "--recursive"))
	for _, k := range words[1:] {
		t := &w.toks[k]
		v := strings.ToLower(strings.TrimSpace(t.text))
		if strings.HasPrefix(v, "-") {
			if v == "--no-preserve-root" {
				w.hit("bash.fs.rm_rf_root", line)
			}
			continue
		}
		val := strings.ToLower(t.val)
		if recursive && (rootTargets[val] || rootTargets[v] || rootTargets[strings.TrimRight(val, "/")+"/"]) {
			w.hit("bash.fs.rm_rf_root", line)
		} else if classifyWritePath("bash", val) != "" || t.flags&(bwParam|bwParamComplex) != 0 && strings.HasPrefix(v, "/") {
			w.hit("bash.fs.delete_outside_cwd", line)
		}
	}
}

func (w *bashWalker) dd(words []int, line int32) {
	for _, k := range words[1:] {
		v := strings.ToLower(w.toks[k].val)
		target, ok := strings.CutPrefix(v, "of=")
		if !ok {
			continue
		}
		if blockDevice.MatchString(target) {
			w.hit("bash.disk.dd_device", line)
		} else if id := classifyWritePath("bash", target); id != "" {
			w.hit(id, line)
		}
	}
}

func (w *bashWalker) chmod(words []int, line int32) {
	for _, k := range words[1:] {
		v := strings.ToLower(w.toks[k].val)
		if v == "777" || v == "a+rwx" || v == "o+w" || strings.Contains(v, "+s") || len(v) == 4 && v[0] >= '2' && v[0] <= '7' && isNumber(v) ||
			classifyWritePath("bash", v) == "bash.fs.write_system" || rootTargets[v] {
			w.hit("bash.fs.chmod_dangerous", line)
			return
		}
	}
}

// writes classifies the destination (the last non-option argument) of
// commands that create or overwrite files.
func (w *bashWalker) writes(name string, words []int) {
	for i := len(words) - 1; i >= 1; i-- {
		t := &w.toks[words[i]]
		if strings.HasPrefix(t.val, "-") {
			continue
		}
		v := strings.ToLower(t.val)
		if id := classifyWritePath("bash", v); id != "" {
			w.hit(id, t.line)
		}
		w.persistTarget(v, t.line)
		if name != "tee" && name != "touch" && name != "mkdir" {
			return
		}
	}
}

func (w *bashWalker) argPrefix(words []int, p string) bool {
	for _, k := range words[1:] {
		if strings.HasPrefix(w.toks[k].val, p) {
			return true
		}
	}
	return false
}

func (w *bashWalker) argContains(words []int, s string) bool {
	for _, k := range words[1:] {
		if strings.Contains(strings.ToLower(w.toks[k].val), s) {
			return true
		}
	}
	return false
}
