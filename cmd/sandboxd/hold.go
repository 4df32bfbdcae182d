package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/executors/aio/aiowire"
)

// A held run (aiowire.HoldHeader) lets the gateway commit the run's
// write-ahead audit record while sandboxd stages it: the request's body is
// the JSON object, then, once the record is durable, aiowire.Release. The
// two overlap instead of adding up, and nothing of the run executes before
// the record exists (manager.auditAhead: nothing runs unaudited).

// errNotReleased is a held run whose body ended or failed before its
// release: the caller gave the run up (its record could not be written, or
// it went away).
var errNotReleased = errors.New("the held run was not released")

// decodeHeld is decodeBody for a request that may ask for a held run. For
// one that does, it reads only the body's first JSON value and returns the
// hold that waits for the release in the rest of the body; for any other
// the hold is nil and the body is read whole, as decodeBody does.
func (s *server) decodeHeld(w http.ResponseWriter, r *http.Request, dst any, required ...string) (hold func() error, ok bool) {
	if r.Header.Get(aiowire.HoldHeader) != "1" {
		return nil, decodeBody(w, r, dst, required...)
	}
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if !tooLarge(w, err) {
			unread, _ := io.Copy(io.Discard, dec.Buffered())
			writeValidation(w, undecodable(err, dec.InputOffset()+unread))
		}
		return nil, false
	}
	if verr := decodeJSON(raw, dst, required); verr != nil {
		writeValidation(w, verr)
		return nil, false
	}
	// The decoder reads ahead: what it buffered past the value comes
	// first.
	rest := io.MultiReader(dec.Buffered(), body)
	return func() error {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.HoldTimeout))
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
		return awaitRelease(rest)
	}, true
}

// undecodable is the 422 of a held body that does not start with one JSON
// value, as decodeJSON gives it for the same body unheld: a missing body,
// or invalid JSON and where (read, the bytes read, when the value is cut
// short).
func undecodable(err error, read int64) *validationError {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return missingBody()
	case errors.As(err, &se):
		return jsonInvalid(int(se.Offset))
	}
	return jsonInvalid(int(read))
}

// awaitRelease reads the rest of a held run's body, after its JSON value:
// whitespace up to aiowire.Release lets the run go; the body's end, an
// error or any other byte discard it.
func awaitRelease(rest io.Reader) error {
	var b [1]byte
	for {
		if _, err := io.ReadFull(rest, b[:]); err != nil {
			return errNotReleased
		}
		switch b[0] {
		case aiowire.Release:
			return nil
		case ' ', '\t', '\r':
			continue
		}
		return errNotReleased
	}
}

// released waits for a held run's release where the run cannot be staged
// (a kernel's cell): false, with the answer written, when it never came.
func released(w http.ResponseWriter, hold func() error) bool {
	if err := hold(); err != nil {
		startFailed(w, "", err)
		return false
	}
	return true
}

// startFailed answers a run that did not start: 409 for a held run never
// released (nothing of it ran), else 500 with what, and the error.
func startFailed(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, errNotReleased) {
		writeFail(w, http.StatusConflict, "The held run was not released: nothing of it ran", nil)
		return
	}
	writeFail(w, http.StatusInternalServerError, what+": "+err.Error(), nil)
}
