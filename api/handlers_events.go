package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/errcode"
	"github.com/sandgate/sandgate/events"
)

// eventRoutes serve the lifecycle event log (DESIGN.md §13): the event
// stream as SSE, and the webhook delivery log for admins. Without a log
// (Deps.Events nil) they answer 404.
func (s *Server) eventRoutes() {
	s.handle("GET /v1/events", []Role{RoleAgent, RoleAdmin}, s.streamEvents)
	s.handle("GET /v1/events/deliveries", []Role{RoleAdmin}, s.listDeliveries)
}

// streamEvents serves GET /v1/events: an agent sees its own tenant's
// events; an admin every tenant's, or ?tenant='s. Resumable with
// Last-Event-ID. The stream outlives the server's write timeout.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Events == nil {
		return errNotFound
	}
	p := principal(r)
	tenant := p.Tenant
	if p.Role == string(RoleAdmin) {
		tenant = r.URL.Query().Get("tenant")
	} else if t := r.URL.Query().Get("tenant"); t != "" && t != p.Tenant {
		return errNotFound
	}
	if _, _, err := events.ParseLastEventID(r); err != nil {
		return errcode.New(errcode.InvalidRequest, "Last-Event-ID must be an event id")
	}
	done, err := s.openStream(p.Tenant)
	if err != nil {
		return err
	}
	defer done()
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.streams: // the gateway is shutting down
			cancel()
		case <-ctx.Done():
		}
	}()
	s.deps.Events.ServeSSE(w, r.WithContext(ctx), tenant)
	return nil
}

// errTooManyStreams refuses an event stream over the tenant's bound.
var errTooManyStreams = errcode.New(errcode.QuotaExceeded,
	"this tenant has its maximum number of event streams open; close one, or resume one with Last-Event-ID")

// openStream counts one more open event stream of tenant, or refuses it
// over Config.MaxEventStreams.
func (s *Server) openStream(tenant string) (done func(), err error) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.openStreams[tenant] >= s.cfg.MaxEventStreams {
		return nil, errTooManyStreams
	}
	s.openStreams[tenant]++
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		if s.openStreams[tenant]--; s.openStreams[tenant] == 0 {
			delete(s.openStreams, tenant)
		}
	}, nil
}

// listDeliveries serves GET /v1/events/deliveries: the webhook delivery
// log (endpoint without credentials, attempts, last status and error).
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	if s.deps.Events == nil {
		return errNotFound
	}
	q := r.URL.Query()
	limit, err := intParam(r, "limit", 0)
	if err != nil {
		return err
	}
	var eventID int64
	if v := q.Get("event_id"); v != "" {
		if eventID, err = strconv.ParseInt(v, 10, 64); err != nil {
			return errcode.New(errcode.InvalidRequest, "event_id must be an event id")
		}
	}
	list, err := s.deps.Events.Deliveries(r.Context(), events.DeliveryQuery{Tenant: q.Get("tenant"),
		Endpoint: q.Get("endpoint"), EventID: eventID, Pending: q.Get("pending") == "true", Limit: limit})
	if err != nil {
		return err
	}
	if list == nil {
		list = []events.Delivery{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": list})
	return nil
}
