package main

import (
	"encoding/json"
	"errors"
	"os"
)

// mergeOut is -merge: see mergeResults.
var mergeOut bool

// runKeys describe the run as a whole: a merge keeps the earlier run's,
// which the report's header names, and a merged scenario carries its own
// date where it records one (ttfo does).
var runKeys = map[string]bool{"date": true, "commit": true, "machine": true, "wall_s": true, "gateway_rss_mb_end": true}

// mergeResults lays the scenarios of the run in fresh over the results
// already in path (a run of -only ttfo keeps every other scenario's
// figures). Without an earlier file, fresh is the result.
func mergeResults(path string, fresh []byte) ([]byte, error) {
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fresh, nil
	}
	if err != nil {
		return nil, err
	}
	var base, add map[string]json.RawMessage
	if err := json.Unmarshal(old, &base); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(fresh, &add); err != nil {
		return nil, err
	}
	for k, v := range add {
		if !runKeys[k] && k != "unavailable" {
			base[k] = v
		}
	}
	return json.Marshal(base)
}
