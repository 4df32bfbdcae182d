package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/manager"
)

// sessionPrefix starts every session id derived from an MCP session, so
// that the approval page, the audit log and GET /v1/sessions tell them
// apart from sessions an HTTP client named.
const sessionPrefix = "mcp-"

// releaseTimeout bounds the release of a derived session's state once its
// MCP session has ended.
const releaseTimeout = 30 * time.Second

// derivedSessionID is the sandgate session of an MCP session. It is a hash,
// not the MCP session id itself: that id is what a client presents to
// resume its session, and sandgate ids are shown to approvers and written
// to the audit log.
func derivedSessionID(mcpSessionID string) string {
	sum := sha256.Sum256([]byte("sandgate mcp session\x00" + mcpSessionID))
	return sessionPrefix + hex.EncodeToString(sum[:16])
}

// session is what the server keeps about one MCP session.
type session struct {
	id        string // the derived sandgate session
	principal manager.Principal
	used      bool // a tool call named the derived session
}

// initialized starts watching a new MCP session, so that its derived
// session is released when it ends. (The initialized notification carries
// no principal; the first tool call that uses the session records it.)
func (s *Server) initialized(_ context.Context, req *sdk.InitializedRequest) {
	ss := req.Session
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if _, ok := s.sessions[ss.ID()]; !ok {
		s.sessions[ss.ID()] = &session{id: derivedSessionID(ss.ID())}
	}
	s.wg.Go(func() {
		_ = ss.Wait()
		s.ended(ss.ID())
	})
}

// touch marks the MCP session's derived session as used by p (the SDK
// binds an MCP session to one principal, so it is always the same) and
// returns its id.
func (s *Server) touch(ss *sdk.ServerSession, p manager.Principal) string {
	id := derivedSessionID(ss.ID())
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss.ID()]; ok {
		st.used, st.principal = true, p
	}
	return id
}

// ended releases what the derived session holds (a browser, a pool
// instance, warm interpreters), as DELETE /v1/sessions/{id} does, and with
// Config.PurgeOnClose its workspace. A session no tool call used holds
// nothing and is only forgotten.
func (s *Server) ended(mcpSessionID string) {
	s.mu.Lock()
	st := s.sessions[mcpSessionID]
	delete(s.sessions, mcpSessionID)
	s.mu.Unlock()
	if st == nil || !st.used {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := s.deps.Manager.DeleteSession(ctx, st.principal, st.id, s.cfg.PurgeOnClose); err != nil {
		s.log.Warn("mcp session ended; releasing its session failed", "session_id", st.id, "principal", st.principal.Name, "err", err)
		return
	}
	s.log.Info("mcp session ended; session released", "session_id", st.id, "principal", st.principal.Name, "purged", s.cfg.PurgeOnClose)
}
