package risk

import (
	"encoding/json"
	"testing"
)

func TestLevelText(t *testing.T) {
	for l := SAFE; l <= CRITICAL; l++ {
		b, err := l.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Level
		if err := back.UnmarshalText(b); err != nil || back != l {
			t.Fatalf("%v: round trip %v %v", l, back, err)
		}
		if p, err := ParseLevel(" " + string(b) + " "); err != nil || p != l {
			t.Fatalf("ParseLevel(%s) = %v %v", b, p, err)
		}
	}
	if l, err := ParseLevel("high"); err != nil || l != HIGH {
		t.Fatalf("case-insensitive parse: %v %v", l, err)
	}
	for _, bad := range []string{"", "SEVERE", "5", "LOWER"} {
		if _, err := ParseLevel(bad); err == nil {
			t.Errorf("ParseLevel(%q) accepted", bad)
		}
	}
	if _, err := Level(7).MarshalText(); err == nil {
		t.Error("out-of-range level marshalled")
	}
	if Level(-1).String() != "Level(-1)" {
		t.Error("String of invalid level")
	}
	b, _ := json.Marshal(struct{ L Level }{MEDIUM})
	if string(b) != `{"L":"MEDIUM"}` {
		t.Fatalf("json %s", b)
	}
	if !(SAFE < LOW && LOW < MEDIUM && MEDIUM < HIGH && HIGH < CRITICAL) {
		t.Fatal("order")
	}
}
