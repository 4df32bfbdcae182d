package docker

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/internal/wsfile"
)

// checkWorkspace opens the workspace (absolute and clean: the prologue
// checked it) and, when the gateway runs as root, makes the directory
// itself usable by the run's identity. Only the directory is touched,
// through an O_NOFOLLOW descriptor: never by path, never recursively,
// never anything the sandbox could have planted. The workspace package
// already gives each session's directory to the session uid, so this only
// changes anything for callers without an identity.
func checkWorkspace(dir string, uid, gid int) (string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("docker: %w: open %s: %w", executors.ErrInvalidWorkspace, dir, err)
	}
	defer unix.Close(fd)
	if os.Geteuid() != 0 {
		return dir, nil
	}
	if err := wsfile.GiveFD(fd, uid, gid); err != nil {
		return "", fmt.Errorf("docker: hand workspace to uid %d: %w", uid, err)
	}
	return dir, nil
}
