package events

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	l := &Log{cfg: Config{RetryMin: 250 * time.Millisecond, RetryMax: 10 * time.Second}}
	for _, tc := range []struct {
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 200 * time.Millisecond, 250 * time.Millisecond},
		{2, 0, 400 * time.Millisecond, 500 * time.Millisecond},
		{3, 0, 800 * time.Millisecond, time.Second},
		{6, 0, 6400 * time.Millisecond, 8 * time.Second},
		{7, 0, 8 * time.Second, 10 * time.Second},
		{100, 0, 8 * time.Second, 10 * time.Second}, // no overflow
		{1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		{1, time.Hour, 10 * time.Second, 10 * time.Second}, // Retry-After within the cap
	} {
		for range 20 {
			if d := l.backoff(tc.attempt, tc.retryAfter); d < tc.lo || d > tc.hi {
				t.Errorf("backoff(%d, %s) = %s, want %s..%s", tc.attempt, tc.retryAfter, d, tc.lo, tc.hi)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.v, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestMatchType(t *testing.T) {
	for _, tc := range []struct {
		filter []string
		typ    string
		want   bool
	}{
		{nil, RunStarted, true},
		{[]string{"session.*"}, SessionCreated, true},
		{[]string{"session.*"}, "sessions.created", false},
		{[]string{"session.*"}, RunStarted, false},
		{[]string{RunFinished}, RunFinished, true},
		{[]string{RunFinished}, RunStarted, false},
		{[]string{"approval.*", EgressDenied}, EgressDenied, true},
	} {
		if got := matchType(tc.filter, tc.typ); got != tc.want {
			t.Errorf("matchType(%v, %q) = %v", tc.filter, tc.typ, got)
		}
	}
}
