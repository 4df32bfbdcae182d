package workspace

import "context"

// MakeDirs makes each of dirs (workspace paths, as ResolvePath takes
// them) in the session's workspace when it is missing, owned by the
// session as the file API's directories are. It serves a front end's path
// layout: DeerFlow's sandboxes always have /mnt/user-data/{workspace,
// uploads,outputs}, so they are there before every run, whatever an
// earlier command removed. Something that exists and is not a directory
// is left as the session made it (the run's cd then fails, as it would in
// DeerFlow's own sandbox); a symlink is never followed out of the
// workspace (the os.Root).
func (w *Workspaces) MakeDirs(ctx context.Context, sessionID string, dirs []string) error {
	s, err := w.open(ctx, sessionID, true)
	if err != nil {
		return err
	}
	defer s.close()
	for _, d := range dirs {
		rel, err := ResolvePath(d)
		if err != nil {
			return err
		}
		if _, err := s.mkdirAll(rel); err != nil {
			return err
		}
	}
	return nil
}
