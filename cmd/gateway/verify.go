package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandgate/sandgate/audit"
)

// errChainBroken is what `sandgate audit verify` returns when a chain does
// not verify; main exits 1 with the first broken link named.
var errChainBroken = errors.New("audit chain broken")

// runAuditVerify is `gateway audit verify [--replica NAME] [gateway flags]`:
// it opens the configured database (same --config, --data-dir and
// SANDGATE_STORAGE_* as the gateway), checks every replica's hash chain
// (or one), prints the report as JSON and fails naming the first broken
// record of each broken chain. It does not resolve interrupted records or
// write anything else.
func runAuditVerify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	replica, rest := cutFlag(args, "replica")
	cfg, err := loadConfig(rest, getenv, stderr)
	if err != nil {
		return err
	}
	gw := &gateway{cfg: cfg, log: newLogger("warn", stderr)}
	db, err := gw.openStorage(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rep, err := audit.Verify(ctx, db, replica)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if len(rep.Broken) > 0 {
		links := make([]string, len(rep.Broken))
		for i, b := range rep.Broken {
			links[i] = b.String()
		}
		return fmt.Errorf("%w: %s", errChainBroken, strings.Join(links, "; "))
	}
	return nil
}

// cutFlag removes --name VALUE or --name=VALUE from args and returns VALUE.
func cutFlag(args []string, name string) (string, []string) {
	var val string
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		switch {
		case a == name && i+1 < len(args) && strings.HasPrefix(args[i], "-"):
			val = args[i+1]
			i++
		case strings.HasPrefix(a, name+"=") && strings.HasPrefix(args[i], "-"):
			val = strings.TrimPrefix(a, name+"=")
		default:
			rest = append(rest, args[i])
		}
	}
	return val, rest
}
