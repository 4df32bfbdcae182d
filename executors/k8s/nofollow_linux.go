package k8s

import "syscall"

// noFollow: a regular file is opened only if it is one, never through a
// symlink placed in its stead.
const noFollow = syscall.O_NOFOLLOW
