package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type toolSpec struct {
	Ver   *string  `json:"ver"`
	Bin   *string  `json:"bin"`
	Alias []string `json:"alias"`
}

type systemInfo struct {
	OS            string   `json:"os"`
	OSVersion     string   `json:"os_version"`
	Arch          string   `json:"arch"`
	User          string   `json:"user"`
	HomeDir       string   `json:"home_dir"`
	Workspace     *string  `json:"workspace"`
	Timezone      string   `json:"timezone"`
	OccupiedPorts []string `json:"occupied_ports"`
}

type sandboxDetail struct {
	System  systemInfo `json:"system"`
	Runtime struct {
		Python []toolSpec `json:"python"`
		NodeJS []toolSpec `json:"nodejs"`
	} `json:"runtime"`
	Utils []utilCategory `json:"utils"`
}

type utilCategory struct {
	Category string     `json:"category"`
	Tools    []utilTool `json:"tools"`
}

type utilTool struct {
	Name        string  `json:"name"`
	Description *string `json:"description"`
}

// sandboxResponse is SandboxResponse (aio-api.md §2.1): the envelope plus
// top-level home_dir, workspace, version and detail; data is a summary.
type sandboxResponse struct {
	Success   bool          `json:"success"`
	Message   *string       `json:"message"`
	Data      *string       `json:"data"`
	Hint      *string       `json:"hint"`
	HomeDir   string        `json:"home_dir"`
	Workspace *string       `json:"workspace"`
	Version   string        `json:"version"`
	Detail    sandboxDetail `json:"detail"`
}

// detail probes the interpreters once.
func (s *server) detail() sandboxDetail {
	s.infoOnce.Do(func() {
		d := &s.info
		name := strconv.Itoa(os.Getuid())
		if u, err := user.LookupId(name); err == nil {
			name = u.Username
		}
		osName, osVer := osRelease()
		d.System = systemInfo{OS: osName, OSVersion: osVer, Arch: runtime.GOARCH, User: name, HomeDir: s.cfg.Home,
			Workspace: ptr(s.cfg.Workspace), Timezone: time.Local.String(), OccupiedPorts: []string{}}
		if spec, ok := probeTool("python3", "--version"); ok {
			spec.Alias = []string{"python", "python3"}
			d.Runtime.Python = []toolSpec{spec}
		} else {
			d.Runtime.Python = []toolSpec{}
		}
		if spec, ok := probeTool("node", "--version"); ok {
			spec.Alias = []string{"node", "nodejs"}
			d.Runtime.NodeJS = []toolSpec{spec}
		} else {
			d.Runtime.NodeJS = []toolSpec{}
		}
		var tools []utilTool
		for _, t := range []string{"bash", s.cfg.Chromium} {
			if _, err := exec.LookPath(t); err == nil {
				tools = append(tools, utilTool{Name: t})
			}
		}
		d.Utils = []utilCategory{{Category: "system", Tools: append([]utilTool{}, tools...)}}
	})
	return s.info
}

// probeTool runs bin with a version flag, bounded in time.
func probeTool(bin, flag string) (toolSpec, bool) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return toolSpec{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, flag).CombinedOutput()
	if err != nil {
		return toolSpec{}, false
	}
	ver := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(string(out), "Python ")), "v")
	return toolSpec{Ver: ptr(ver), Bin: ptr(path)}, true
}

func osRelease() (string, string) {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS, ""
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = strings.Trim(v, `"`)
		}
	}
	return kv["NAME"], kv["VERSION_ID"]
}

func (s *server) handleSandbox(w http.ResponseWriter, _ *http.Request) {
	d := s.detail()
	summary := fmt.Sprintf("System Environment (%s):\n- OS: %s %s (%s)\n- User: %s\n- Home: %s\n- Workspace: %s",
		version, d.System.OS, d.System.OSVersion, d.System.Arch, d.System.User, s.cfg.Home, s.cfg.Workspace)
	writeJSON(w, http.StatusOK, sandboxResponse{Success: true, Message: ptr(msgOK), Data: ptr(summary),
		HomeDir: s.cfg.Home, Workspace: ptr(s.cfg.Workspace), Version: version, Detail: d})
}
