package docker

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executors"
	"github.com/sandgate/sandgate/executors/executortest"
)

// TestEngineChecksStand: a probe asks the engine for its runtimes
// (GET /info, which runs runc and docker-init on the engine's side) and
// for the images only when their last check has lapsed, the engine
// stopped answering, or a run failed as unavailable; a run failing on a
// removed image makes the next probe name the missing image.
func TestEngineChecksStand(t *testing.T) {
	needEngine(t)
	eng := executortest.NewCountingEngine(t)
	img := "sandgate-test-recheck:" + executortest.Nonce()
	tag := func() {
		if out, err := exec.Command("docker", "tag", DefaultImage, img).CombinedOutput(); err != nil {
			t.Fatalf("docker tag: %v: %s", err, out)
		}
	}
	tag()
	untag := func() { _ = exec.Command("docker", "rmi", img).Run() } // the tag only: the image has another
	t.Cleanup(untag)
	e := newTestExecutor(t, func(c *Config) {
		c.Host, c.Runtime = eng.Host(), "runc"
		c.Images = map[string]string{executors.LangPython: img, executors.LangBash: img, executors.LangJavaScript: img}
	})
	info, inspects := eng.Calls(executortest.EngineInfo), eng.Calls(executortest.EngineImageInspect)
	probe := func() error { return e.Available(t.Context()) }
	for i := range 3 {
		if err := probe(); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if got := eng.Calls(executortest.EngineInfo) - info; got != 1 {
		t.Errorf("three probes asked for the engine's info %d times, want 1", got)
	}
	if got := eng.Calls(executortest.EngineImageInspect) - inspects; got != 1 {
		t.Errorf("three probes inspected the image %d times, want 1", got)
	}

	eng.Down.Store(true)
	if err := probe(); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("probe while the engine answers 503: %v", err)
	}
	eng.Down.Store(false)
	before := eng.Calls(executortest.EngineImageInspect)
	if err := probe(); err != nil || eng.Calls(executortest.EngineImageInspect) != before+1 {
		t.Fatalf("probe once the engine is back: %v, %d inspects, want 1 (an engine that went away is checked afresh)",
			err, eng.Calls(executortest.EngineImageInspect)-before)
	}

	untag()
	if err := probe(); err != nil {
		t.Fatalf("probe right after the image's removal: %v (the last check stands until a run fails)", err)
	}
	if _, err := e.Execute(t.Context(), spec(t, executors.LangPython, "print(1)")); !errors.Is(err, executors.ErrUnavailable) {
		t.Fatalf("run on a removed image: %v, want executor unavailable", err)
	}
	err := probe()
	var ue *executors.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "missing") {
		t.Fatalf("probe after the failed run: %v, want the image named missing", err)
	}

	tag()
	if err := probe(); err != nil {
		t.Fatalf("probe once the image is back: %v (a failing check is never kept)", err)
	}
	before = eng.Calls(executortest.EngineImageInspect)
	if err := probe(); err != nil || eng.Calls(executortest.EngineImageInspect) != before {
		t.Errorf("probe after a passing check: %v, %d more inspects, want none", err, eng.Calls(executortest.EngineImageInspect)-before)
	}
}
