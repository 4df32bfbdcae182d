package audit_test

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/audit"
)

func TestMemory_ZeroValueAndRecords(t *testing.T) {
	var m audit.Memory
	recs := appendN(t, &m, 3, minimal)
	got := m.Records()
	if len(got) != 3 || got[0].ID != recs[0].ID || got[2].RequestID != "req-2" {
		t.Fatalf("Records() = %+v", got)
	}
}

func TestMemory_AppendErr(t *testing.T) {
	boom := errors.New("disk on fire")
	m := audit.NewMemory()
	m.AppendErr = boom
	rec := minimal(1)
	if err := m.Append(t.Context(), &rec); !errors.Is(err, boom) {
		t.Fatalf("Append: err = %v, want %v", err, boom)
	}
	if rec.ID != 0 || !rec.Time.IsZero() {
		t.Errorf("failed Append modified the record: %+v", rec)
	}
	if len(m.Records()) != 0 {
		t.Error("failed Append stored a record")
	}
}
