package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/events"
)

// LogSink is the EventSink that keeps the manager's events in an event
// log: the gateway's, and the benchmarks' that wire a manager as the
// gateway does.
type LogSink struct{ Log *events.Log }

// Publish stores es in one commit. An event whose data does not encode is
// left out, with an error naming it; the others are kept.
func (s LogSink) Publish(ctx context.Context, es ...Event) error {
	out := make([]events.Event, 0, len(es))
	var errs []error
	for _, e := range es {
		data, err := json.Marshal(e.Data)
		if err != nil {
			errs = append(errs, fmt.Errorf("events: encode %s: %w", e.Type, err))
			continue
		}
		out = append(out, events.Event{Type: e.Type, Tenant: e.Tenant, SessionID: e.SessionID, Data: data})
	}
	return errors.Join(errors.Join(errs...), s.Log.Publish(ctx, out...))
}
