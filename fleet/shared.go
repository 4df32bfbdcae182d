package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/audit"
)

// MarkerFile is the file CheckShared keeps in the shared directory.
const MarkerFile = ".sandgate-fleet"

// ErrNotShared is returned by CheckShared when dir is not the directory
// the fleet's other replicas use.
var ErrNotShared = errors.New("fleet: the workspace root is not shared with the other replicas")

// CheckShared makes sure dir (the workspace root) is the directory every
// replica of the fleet mounts: a session may move to another replica
// (its owner died), and its files must be there. The first replica writes
// a random token to dir/MarkerFile and to the database; every later one
// must find the same token in its dir. A replica whose dir lacks the file
// or holds another token is refused. To move a fleet to a new workspace
// root, copy the marker along (or delete the row in the markers table).
func CheckShared(ctx context.Context, db audit.Database, dir string) error {
	if err := db.Migrate(ctx, component, migrations); err != nil {
		return err
	}
	path := filepath.Join(dir, MarkerFile)
	dbTok, err := readToken(ctx, db)
	if err != nil {
		return err
	}
	fileTok, err := readMarker(path)
	if err != nil {
		return err
	}
	if dbTok == "" {
		if fileTok == "" {
			if fileTok, err = createMarker(path); err != nil {
				return err
			}
		}
		if _, err := db.DB().ExecContext(ctx, `INSERT INTO markers (name, token) VALUES ('workspaces', $1) ON CONFLICT (name) DO NOTHING`, fileTok); err != nil {
			return fmt.Errorf("fleet: record the workspace marker: %w", err)
		}
		if dbTok, err = readToken(ctx, db); err != nil {
			return err
		}
	}
	if fileTok != dbTok {
		why := "it holds another fleet's marker"
		if fileTok == "" {
			why = "it has no " + MarkerFile + " marker"
		}
		return fmt.Errorf("%w: %s: %s (mount the fleet's shared workspace storage there)", ErrNotShared, dir, why)
	}
	return nil
}

func readToken(ctx context.Context, db audit.Database) (string, error) {
	var tok string
	err := db.DB().QueryRowContext(ctx, `SELECT coalesce((SELECT token FROM markers WHERE name = 'workspaces'), '')`).Scan(&tok)
	if err != nil {
		return "", fmt.Errorf("fleet: read the workspace marker: %w", err)
	}
	return tok, nil
}

func readMarker(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("fleet: read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// createMarker writes a new token, or reads the one a replica starting at
// the same moment wrote first.
func createMarker(path string) (string, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return "", fmt.Errorf("fleet: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return readMarker(path)
	}
	if err != nil {
		return "", fmt.Errorf("fleet: create %s: %w", path, err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("fleet: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("fleet: write %s: %w", path, err)
	}
	return tok, nil
}
