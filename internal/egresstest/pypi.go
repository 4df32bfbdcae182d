package egresstest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// PackageIndex is a PEP 503 simple repository serving one pure-Python
// wheel, sgdemo 1.0, at /simple/sgdemo/ and /files/, and PyPI's legacy
// upload endpoint at POST /legacy/, which accepts every upload (so that
// only the proxy can refuse one). Log holds "METHOD path" of every request.
type PackageIndex struct {
	Wheel     []byte
	WheelName string
	mu        sync.Mutex
	log       []string
}

// Package is the name the index serves.
const Package = "sgdemo"

// NewPackageIndex builds the index and its wheel.
func NewPackageIndex(t testing.TB) *PackageIndex {
	t.Helper()
	whl, err := wheel()
	if err != nil {
		t.Fatal(err)
	}
	return &PackageIndex{Wheel: whl, WheelName: Package + "-1.0-py3-none-any.whl"}
}

func (p *PackageIndex) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.log = append(p.log, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	sum := sha256.Sum256(p.Wheel)
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/legacy"):
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "uploaded\n")
	case r.URL.Path == "/simple/" || r.URL.Path == "/simple":
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/simple/%s/\">%s</a></body></html>\n", Package, Package)
	case r.URL.Path == "/simple/"+Package+"/":
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>\n",
			p.WheelName, hex.EncodeToString(sum[:]), p.WheelName)
	case r.URL.Path == "/files/"+p.WheelName:
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(p.Wheel)
	default:
		http.NotFound(w, r)
	}
}

// Served is what the index was asked, in order.
func (p *PackageIndex) Served() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

// wheel is a valid pure-Python wheel (PEP 427): the module, METADATA,
// WHEEL and a RECORD with every other file's hash.
func wheel() ([]byte, error) {
	files := []struct{ name, body string }{
		{Package + "/__init__.py", "GREETING = 'hello from sgdemo'\n"},
		{Package + "-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: " + Package + "\nVersion: 1.0\n"},
		{Package + "-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandgate-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return nil, err
		}
		if _, err := io.WriteString(w, f.body); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(Package + "-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create(Package + "-1.0.dist-info/RECORD")
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(w, record.String()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
