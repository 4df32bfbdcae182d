package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/events"
)

// openEvents opens the lifecycle event log on the gateway's database: one
// log per fleet on PostgreSQL, where each replica delivers the webhooks
// it holds the lease of.
func (gw *gateway) openEvents(ctx context.Context) error {
	cfg := gw.cfg.Events
	cfg.Replica = replicaName(gw.cfg.Storage)
	l, err := events.Open(ctx, gw.audit, cfg, gw.log)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	gw.events = l
	return nil
}

// egressEvents is the egress proxy's audit store: every record goes to
// the audit log, and a denied connection is also an egress.denied event.
type egressEvents struct {
	audit.Store
	log *events.Log
}

func (s egressEvents) Append(ctx context.Context, rec *audit.Record) error {
	err := s.Store.Append(ctx, rec)
	if rec.Outcome == audit.OutcomeDenied {
		data, _ := json.Marshal(map[string]any{"request_id": rec.RequestID, "host": rec.Detail["host"],
			"port": rec.Detail["port"], "rule": rec.Detail["rule"], "reasons": rec.Reasons})
		if perr := s.log.Publish(ctx, events.Event{Type: "egress.denied", Tenant: rec.Tenant, SessionID: rec.SessionID,
			Data: data}); perr != nil {
			return err // the audit record is what a caller depends on; the event's loss is logged by the log
		}
	}
	return err
}
