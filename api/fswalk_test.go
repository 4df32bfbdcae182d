package api

import "io/fs"

func fsWalk(fsys fs.FS, fn func(path string, b []byte)) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fn(p, b)
		return nil
	})
}
