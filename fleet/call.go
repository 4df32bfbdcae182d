package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sandgate/sandgate/errcode"
)

// forwardLineMax bounds one line of a forwarded call's answer: a tool's
// result, with its output under the run's caps and a screenshot.
const forwardLineMax = 64 << 20

// CallTool posts a tool call (mcp.ForwardPath) to the replica at base,
// signed as a hop of this fleet and authenticated by the client's own
// authorization, and hands each line of its NDJSON answer to line. A
// replica that refuses the connection is session_unavailable: nothing ran.
func (rt *Router) CallTool(ctx context.Context, base, authorization, requestID string, body []byte, line func([]byte)) error {
	if base == "" {
		return errUnreachable
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/v1/fleet/mcp/call", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", errForward, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", authorization)
	signHop(rt.key, req, rt.reg.opts.Replica, requestID, time.Now())
	res, err := rt.transport.RoundTrip(req)
	if err != nil {
		if refused(err) {
			return errUnreachable
		}
		return fmt.Errorf("%w: %w", errForward, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return ownerRefusal(res)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), forwardLineMax)
	for sc.Scan() {
		line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", errForward, err)
	}
	return nil
}

// ownerRefusal is the owner's own refusal of a forwarded call (the body
// too large, the client's token revoked): its stable code and message,
// as the client would have had them from the owner. An answer without
// one is a failed forward.
func ownerRefusal(res *http.Response) error {
	var body struct {
		Error struct {
			Code    errcode.Code `json:"code"`
			Message string       `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body); err != nil || body.Error.Code == "" {
		return fmt.Errorf("%w: the replica answered %d", errForward, res.StatusCode)
	}
	return errcode.New(body.Error.Code, body.Error.Message)
}
