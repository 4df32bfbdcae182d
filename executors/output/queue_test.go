package output

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestQueueCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		pushes []piece
		want   []string // "stream:data" per chunk Take returns
	}{
		{name: "alternating streams stay apart", max: 8,
			pushes: []piece{{Stdout, "a"}, {Stderr, "b"}, {Stdout, "c"}},
			want:   []string{"stdout:a", "stderr:b", "stdout:c"}},
		{name: "a stream's waiting chunks merge", max: 8,
			pushes: []piece{{Stdout, "a"}, {Stdout, "b"}, {Stderr, "c"}, {Stderr, "d"}, {Stdout, "e"}},
			want:   []string{"stdout:ab", "stderr:cd", "stdout:e"}},
		{name: "past the bound a chunk joins its stream's last", max: 2,
			pushes: []piece{{Stdout, "1"}, {Stderr, "2"}, {Stdout, "3"}, {Stderr, "4"}},
			want:   []string{"stdout:13", "stderr:24"}},
		{name: "empty chunks are not queued", max: 8,
			pushes: []piece{{Stdout, ""}, {Stderr, "x"}, {Stdout, ""}},
			want:   []string{"stderr:x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue(tc.max)
			for i, p := range tc.pushes {
				q.Push(Chunk{Seq: uint64(i + 1), Stream: p.s, Data: []byte(p.text)})
			}
			var got []string
			for _, c := range q.Take() {
				got = append(got, c.Stream.String()+":"+string(c.Data))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("Take = %v, want %v", got, tc.want)
			}
			if rest := q.Take(); len(rest) != 0 {
				t.Fatalf("second Take = %v, want nothing", rest)
			}
		})
	}
}

// TestQueueCopiesData: the Tap's Data is only valid during the call (the
// Collector reuses it); what Take returns must not change afterwards.
func TestQueueCopiesData(t *testing.T) {
	q := NewQueue(0)
	buf := []byte("first")
	q.Push(Chunk{Seq: 1, Stream: Stdout, Data: buf})
	copy(buf, "XXXXX")
	if got := q.Take(); len(got) != 1 || string(got[0].Data) != "first" || got[0].Seq != 1 {
		t.Fatalf("Take = %+v", got)
	}
}

// TestQueueBehindACollector: a consumer that is slower than the program
// still receives every kept byte of each stream, in order.
func TestQueueBehindACollector(t *testing.T) {
	q := NewQueue(4)
	c := New(Options{Limit: 1 << 20, Tap: q.Push})
	var got [2]strings.Builder
	done := make(chan struct{})
	var wg sync.WaitGroup
	drain := func() {
		for _, ch := range q.Take() {
			got[ch.Stream].Write(ch.Data)
		}
	}
	wg.Go(func() {
		for {
			select {
			case <-q.Ready():
				drain()
				time.Sleep(time.Millisecond) // a slow client
			case <-done:
				drain()
				return
			}
		}
	})
	want := writeLines(c, 2000)
	r := c.Finish()
	close(done)
	wg.Wait()
	for s := range got {
		if got[s].String() != want[s] {
			t.Fatalf("%s: queued output differs from what was written", Stream(s))
		}
	}
	if r.Stdout != want[Stdout] {
		t.Fatalf("collector result differs")
	}
}

// TestQueueWithoutConsumer: with nobody taking, the program's writes still
// complete (the Tap never waits) and the waiting chunks stay within the
// bound, holding every byte.
func TestQueueWithoutConsumer(t *testing.T) {
	q := NewQueue(4)
	c := New(Options{Limit: 1 << 20, Tap: q.Push})
	want := writeLines(c, 2000)
	c.Finish()
	chunks := q.Take()
	if len(chunks) > 4 {
		t.Fatalf("%d chunks wait, want at most 4", len(chunks))
	}
	var got [2]string
	for _, ch := range chunks {
		got[ch.Stream] += string(ch.Data)
	}
	if got != want {
		t.Fatal("the waiting chunks lost bytes")
	}
}

// writeLines writes n lines alternating between the streams and returns
// what each stream got.
func writeLines(c *Collector, n int) [2]string {
	var want [2]strings.Builder
	for i := range n {
		s := Stream(i % 2)
		line := fmt.Sprintf("%s line %d\n", s, i)
		want[s].WriteString(line)
		c.Write(s, []byte(line))
	}
	return [2]string{want[0].String(), want[1].String()}
}
