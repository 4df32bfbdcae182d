package events

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// ErrBadLastEventID is returned (wrapped) by ParseLastEventID.
var ErrBadLastEventID = errcode.New(errcode.InvalidRequest, "Last-Event-ID must be a non-negative integer")

// sseWriteTimeout bounds one write to an SSE client: one that reads
// nothing for this long is dropped, so that it cannot hold a handler (or
// Close) forever.
const sseWriteTimeout = 30 * time.Second

// ParseLastEventID returns the resume point of r: the Last-Event-ID
// header, or else the last_event_id query parameter (for clients that
// cannot set headers). ok is false when r has neither. A caller that wants
// its own error body calls it before ServeSSE.
func ParseLastEventID(r *http.Request) (id int64, ok bool, err error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("last_event_id")
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false, nil
	}
	id, err = strconv.ParseInt(v, 10, 64)
	if err != nil || id < 0 {
		return 0, false, ErrBadLastEventID
	}
	return id, true, nil
}

// ServeSSE streams the log to w as Server-Sent Events: first what is
// stored after the resume point (ParseLastEventID), then live events, until
// r's context ends or the Log closes. Without a resume point the stream
// starts at the log's current end; last_event_id=0 replays everything
// retained. tenant filters the events ("" for every tenant's): the caller
// has authenticated the request and chosen it.
//
// Each message is
//
//	id: <event id>
//	event: <event type>
//	data: <the event as JSON>
//
// and an idle stream gets a comment line every Config.Keepalive. A resume
// point older than the retention window silently starts at the oldest
// event kept.
func (l *Log) ServeSSE(w http.ResponseWriter, r *http.Request, tenant string) {
	after, resume, err := ParseLastEventID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if l.closed.Load() {
		http.Error(w, "event log closed", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()

	head, err := l.store.head(ctx)
	if err != nil {
		l.log.Warn("SSE: read the log's head", "err", err)
		http.Error(w, "event log unavailable", http.StatusServiceUnavailable)
		return
	}
	if !resume || after > head {
		// No resume point, or one from another log (a database
		// reset): start at the end.
		after = head
	}

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	flush := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)) // not every writer has deadlines
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	// A comment first, so that the client sees the stream open at once.
	_, _ = bw.WriteString(": stream open\n\n")
	if flush() != nil {
		return
	}

	keepalive := time.NewTicker(l.cfg.Keepalive)
	defer keepalive.Stop()
	all := tenant == ""
	for {
		wake := l.sig.wait()
		evs, err := l.since(ctx, all, tenant, after, MaxLimit)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
				l.log.Warn("SSE: read events", "err", err)
			}
			return
		}
		for _, ev := range evs {
			data, err := json.Marshal(ev)
			if err != nil {
				l.log.Warn("SSE: encode event", "event_id", ev.ID, "err", err)
				return
			}
			// Type is [A-Za-z0-9_.] and data is compact JSON: no
			// newline can break a field.
			_, _ = bw.WriteString("id: " + strconv.FormatInt(ev.ID, 10) + "\nevent: " + ev.Type + "\ndata: ")
			_, _ = bw.Write(data)
			_, _ = bw.WriteString("\n\n")
			after = ev.ID
		}
		if len(evs) > 0 {
			if flush() != nil {
				return
			}
			keepalive.Reset(l.cfg.Keepalive)
			if len(evs) == MaxLimit {
				continue
			}
		}
		select {
		case <-wake:
		case <-keepalive.C:
			_, _ = bw.WriteString(": keepalive\n\n")
			if flush() != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
