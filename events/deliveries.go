package events

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// DeliveryQuery selects delivery records. Zero fields do not filter.
type DeliveryQuery struct {
	// Tenant selects the endpoints of one tenant ("" for every
	// endpoint, operators' included).
	Tenant string
	// Endpoint is an endpoint's id (Delivery.EndpointID) or its URL as
	// the delivery log shows it (Delivery.Endpoint).
	Endpoint string
	// EventID selects the deliveries of one event.
	EventID int64
	// Pending keeps the deliveries not (yet) delivered: failing ones,
	// waiting for their next attempt.
	Pending bool
	// BeforeEventID pages backwards: only events with a lower id.
	BeforeEventID int64
	// Limit is DefaultLimit when ≤ 0, and at most MaxLimit.
	Limit int
}

// Delivery is the record of one event's delivery to one endpoint,
// updated at every attempt.
type Delivery struct {
	// EndpointID is the endpoint's stable key (a digest of its tenant and
	// full URL).
	EndpointID string `json:"endpoint_id"`
	// Endpoint is the endpoint's URL without userinfo, query or fragment.
	Endpoint string `json:"endpoint"`
	// Tenant is the endpoint's tenant ("" for an operator's endpoint,
	// which gets every tenant's events).
	Tenant    string `json:"tenant,omitempty"`
	EventID   int64  `json:"event_id"`
	EventType string `json:"event_type"`
	// WebhookID is the webhook-id header of every attempt.
	WebhookID string `json:"webhook_id"`
	Attempts  int    `json:"attempts"`
	// LastStatus is the HTTP status of the last attempt; 0 when it got
	// no answer (refused, reset, timed out).
	LastStatus int `json:"last_status"`
	// LastError is why the last attempt failed, in a few words; "" once
	// delivered.
	LastError    string    `json:"last_error,omitempty"`
	FirstAttempt time.Time `json:"first_attempt_at"`
	LastAttempt  time.Time `json:"last_attempt_at"`
	// DeliveredAt is when a 2xx answered; nil while pending.
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	// NextAttempt is when the next attempt is due; nil once delivered.
	NextAttempt *time.Time `json:"next_attempt_at,omitempty"`
	// Replica made the last attempt.
	Replica string `json:"replica,omitempty"`
}

// Deliveries returns the delivery records q selects, newest event first.
// An event that waits behind a failing one has no record yet: the failing
// one's record (Pending) says why delivery is stuck.
func (l *Log) Deliveries(ctx context.Context, q DeliveryQuery) ([]Delivery, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	query := `SELECT endpoint, url, tenant, event_id, event_type, webhook_id, attempts, last_status, last_error,
	first_attempt_at, last_attempt_at, delivered_at, next_attempt_at, replica FROM webhook_deliveries WHERE 1 = 1`
	var args []any
	if q.Tenant != "" {
		query += ` AND tenant = ?`
		args = append(args, q.Tenant)
	}
	if q.Endpoint != "" {
		query += ` AND (endpoint = ? OR url = ?)`
		args = append(args, q.Endpoint, q.Endpoint)
	}
	if q.EventID != 0 {
		query += ` AND event_id = ?`
		args = append(args, q.EventID)
	}
	if q.Pending {
		query += ` AND delivered_at IS NULL`
	}
	if q.BeforeEventID != 0 {
		query += ` AND event_id < ?`
		args = append(args, q.BeforeEventID)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	query += ` ORDER BY event_id DESC, endpoint LIMIT ?`
	args = append(args, min(limit, MaxLimit))
	rows, err := l.db.DB().QueryContext(ctx, l.store.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("events: read deliveries: %w", err)
	}
	defer rows.Close()
	out := []Delivery{}
	for rows.Next() {
		var (
			d                   Delivery
			first, last         string
			delivered, nextTime sql.NullString
		)
		if err := rows.Scan(&d.EndpointID, &d.Endpoint, &d.Tenant, &d.EventID, &d.EventType, &d.WebhookID, &d.Attempts,
			&d.LastStatus, &d.LastError, &first, &last, &delivered, &nextTime, &d.Replica); err != nil {
			return nil, fmt.Errorf("events: read deliveries: %w", err)
		}
		d.FirstAttempt, d.LastAttempt = parseTime(first), parseTime(last)
		if delivered.Valid {
			t := parseTime(delivered.String)
			d.DeliveredAt = &t
		}
		if nextTime.Valid {
			t := parseTime(nextTime.String)
			d.NextAttempt = &t
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events: read deliveries: %w", err)
	}
	return out, nil
}
