package subprocess

import (
	"os"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/executors"
)

// TestMainThreadKeepsItsNamespaces: runs build their roots on threads of
// their own that enter other mount namespaces and are never handed back;
// none of them is ever the main thread, whose namespaces /proc/self shows
// to the whole gateway (a parked main thread made a restarted gateway's aio
// pool read a run's mount table instead of its own: issue 21's soak).
func TestMainThreadKeepsItsNamespaces(t *testing.T) {
	requireRoot(t)
	before, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	e := newTestExecutor(t, func(c *Config) { c.DisableWarm = true })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 15 {
				if res, _ := execute(t, e, executors.LangBash, "true"); res.ExitCode != 0 {
					t.Errorf("run: %+v", res)
				}
			}
		})
	}
	wg.Wait()
	if after, err := os.Readlink("/proc/self/ns/mnt"); err != nil || after != before {
		t.Fatalf("the main thread's mount namespace is %s (%v), was %s", after, err, before)
	}
}
