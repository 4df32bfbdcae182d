package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
)

var errUsage = errors.New("usage")

// loadConfig applies, in increasing precedence: defaults, the --config file,
// environment variables, flags. Then it validates the result.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (strict: unknown keys are errors)")
	listen := fs.String("listen", "", "listen address (env SANDGATE_LISTEN; default 127.0.0.1:8080)")
	mode := fs.String("mode", "", "STRICT or PERMISSIVE (env SANDGATE_MODE; default STRICT)")
	dataDir := fs.String("data-dir", "", "workspaces and audit database (env SANDGATE_DATA_DIR; default .data)")
	policyDir := fs.String("policy-dir", "", "watched Rego directory (env SANDGATE_POLICY_DIR; default: the embedded policy)")
	if err := fs.Parse(args); err != nil {
		return Config{}, errUsage
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg := Default()
	if *path != "" {
		var err error
		if cfg, err = LoadFile(*path); err != nil {
			return Config{}, err
		}
	}
	override(&cfg.Listen, getenv("SANDGATE_LISTEN"), *listen)
	override(&cfg.Mode, getenv("SANDGATE_MODE"), *mode)
	override(&cfg.DataDir, getenv("SANDGATE_DATA_DIR"), *dataDir)
	override(&cfg.Policy.Dir, getenv("SANDGATE_POLICY_DIR"), *policyDir)
	override(&cfg.Storage.Driver, getenv("SANDGATE_STORAGE_DRIVER"), "")
	override(&cfg.Storage.DSN, getenv("SANDGATE_STORAGE_DSN"), "")
	override(&cfg.Storage.Replica, getenv("SANDGATE_REPLICA"), "")
	override(&cfg.Storage.AdvertiseURL, getenv("SANDGATE_ADVERTISE_URL"), "")
	for _, role := range []string{"agent", "approver", "admin"} {
		if tok := getenv(envTokenName(role)); tok != "" {
			cfg.Auth.Tokens = append(cfg.Auth.Tokens, TokenConfig{Name: "env-" + role, Role: role, Token: tok})
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration:\n%w", err)
	}
	// A relative data_dir (the default ".data") is relative to the working
	// directory at start; components that keep paths (the aio pool, the
	// browser router) need it absolute, and a later chdir must not move it.
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return Config{}, fmt.Errorf("data_dir: %w", err)
	}
	cfg.DataDir = abs
	return cfg, nil
}

func envTokenName(role string) string {
	switch role {
	case "agent":
		return "SANDGATE_AGENT_TOKEN"
	case "approver":
		return "SANDGATE_APPROVER_TOKEN"
	}
	return "SANDGATE_ADMIN_TOKEN"
}

// override sets *dst from env, then from flag, when they are non-empty.
func override(dst *string, env, flagVal string) {
	if env != "" {
		*dst = env
	}
	if flagVal != "" {
		*dst = flagVal
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
