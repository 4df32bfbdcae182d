package gvisor

import "github.com/sandgate/sandgate/executors/docker"

// noPool turns the pool of pre-started sandboxes off for the tests that
// check runs of their own containers (the pool has its own tests).
var noPool = docker.PoolConfig{Max: -1}
