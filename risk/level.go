package risk

import (
	"fmt"
	"strings"
)

// Level orders risk hints. The zero value is SAFE, so a forgotten
// assignment would be dangerous; Assess therefore always sets the level
// explicitly and never returns SAFE without an allowlist proof.
type Level int

// Risk levels, from proven safe to "deny in production".
const (
	SAFE Level = iota
	LOW
	MEDIUM
	HIGH
	CRITICAL
)

var levelNames = [...]string{"SAFE", "LOW", "MEDIUM", "HIGH", "CRITICAL"}

// String returns the upper-case name ("SAFE" .. "CRITICAL"), or
// "Level(n)" for values outside the range.
func (l Level) String() string {
	if l < SAFE || l > CRITICAL {
		return fmt.Sprintf("Level(%d)", int(l))
	}
	return levelNames[l]
}

// MarshalText encodes the level by name so JSON and YAML carry "HIGH", not 3.
// Out-of-range values are an error rather than a number nobody can read.
func (l Level) MarshalText() ([]byte, error) {
	if l < SAFE || l > CRITICAL {
		return nil, fmt.Errorf("risk: invalid level %d", int(l))
	}
	return []byte(levelNames[l]), nil
}

// UnmarshalText accepts the names ParseLevel accepts.
func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseLevel parses a level name, case-insensitively and ignoring
// surrounding space, so admin-written files may say "high".
func ParseLevel(s string) (Level, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	for i, n := range levelNames {
		if t == n {
			return Level(i), nil
		}
	}
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return SAFE, fmt.Errorf("risk: unknown level %q (want SAFE, LOW, MEDIUM, HIGH or CRITICAL)", s)
}

func maxLevel(a, b Level) Level {
	if a > b {
		return a
	}
	return b
}
