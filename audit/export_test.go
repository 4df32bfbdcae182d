package audit

import "time"

// SetWriteTimeout changes s's Options.WriteTimeout, so that a test can
// make one Append time out and give the next a generous budget on the
// same store. It holds the write token, which the writer takes before
// reading the timeout; the caller must not be inside Append.
func SetWriteTimeout(s *SQLite, d time.Duration) {
	<-s.wtoken
	defer s.unlockWriter()
	s.writeTimeout = d
}
