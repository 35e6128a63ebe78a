package http

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// lifecycleAfter returns the whole lifecycle log after id, page by page.
func (b *testBundle) lifecycleAfter(t *testing.T, after int64) []store.LifecycleEvent {
	t.Helper()
	var out []store.LifecycleEvent
	for {
		page, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{After: after, Limit: readPage})
		if err != nil {
			t.Fatalf("read lifecycle after %d: %v", after, err)
		}
		out = append(out, page...)
		if len(page) < readPage {
			return out
		}
		after = page[len(page)-1].ID
	}
}

// wantLog checks that frames are exactly the events of log, in order:
// same ids, types and payloads, nothing missing and nothing twice.
func wantLog(t *testing.T, who string, frames []frame, log []store.LifecycleEvent) {
	t.Helper()
	if len(frames) != len(log) {
		t.Fatalf("%s: %d frames, the log holds %d events", who, len(frames), len(log))
	}
	for i, e := range log {
		data, err := compactJSON(e.Payload)
		if err != nil {
			t.Fatalf("event %d: %v", e.ID, err)
		}
		if f := frames[i]; f.id != strconv.FormatInt(e.ID, 10) || f.event != e.Type || !bytes.Equal(f.data, data) {
			t.Fatalf("%s: frame %d is %s %s, the log has %d %s", who, i, f.id, f.event, e.ID, e.Type)
		}
	}
}

// nextN reads n event frames.
func (s *sseStream) nextN(t *testing.T, n int) []frame {
	t.Helper()
	out := make([]frame, n)
	for i := range out {
		out[i] = s.next(t)
	}
	return out
}

// lastID returns the id of the lifecycle log's last event.
func (b *testBundle) lastID(t *testing.T) int64 {
	t.Helper()
	log := b.lifecycleAfter(t, 0)
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].ID
}

// sseClients returns how many streams of kind are connected.
func (b *testBundle) sseClients(t *testing.T, kind string) float64 {
	t.Helper()
	return b.metricSum(t, "subagentd_sse_clients", map[string]string{"stream": kind})
}

// runMany starts n runs under parent at once, completes each as the
// provider publishes it, and waits until all settled.
func (b *testBundle) runMany(t *testing.T, p *fakeProvider, parent string, n int) {
	t.Helper()
	answers := make([]func() response, n)
	for i := range answers {
		answers[i] = b.async(t, call{method: http.MethodPost, path: "/v1/runs", body: map[string]any{
			"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("run " + strconv.Itoa(i)),
		}})
	}
	for i := range n {
		select {
		case fr := <-p.started:
			fr.complete(t, "answer "+strconv.Itoa(i))
		case <-time.After(streamTimeout):
			t.Fatalf("only %d of %d runs started", i, n)
		}
	}
	settled := make([]func() response, n)
	for i, answer := range answers {
		r := answer()
		if r.status != http.StatusCreated {
			t.Fatalf("start %d: status %d: %s", i, r.status, r.body)
		}
		var run runJSON
		r.decode(t, &run)
		settled[i] = b.async(t, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "?wait=10"})
	}
	for _, answer := range settled {
		var run runJSON
		answer().decode(t, &run)
		if run.State != store.StateSettled {
			t.Fatalf("run %s did not settle: %+v", run.RunID, run)
		}
	}
}

// TestEvents_R14_ReconnectAfter100Runs: a subscriber that read some events
// and disconnected reconnects with Last-Event-ID after 100 runs started
// and settled, and receives exactly the events it missed — those of the
// durable lifecycle log after its last id, in order, none twice — and
// then live ones. The ring is far smaller than what it missed, so the
// replay crosses from the store into the ring.
func TestEvents_R14_ReconnectAfter100Runs(t *testing.T) {
	b := setup(t, func(c *Config) { c.RingSize = 16 })
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)

	from := b.lastID(t)
	s := b.stream(t, "/v1/events", nil)
	b.runMany(t, p, parent, 3)
	seen := s.nextN(t, 6)
	wantLog(t, "first connection", seen, b.lifecycleAfter(t, from))
	s.close()
	eventually(t, "the server to drop the stream", func() bool { return b.sseClients(t, "events") == 0 })

	b.runMany(t, p, parent, 100)
	last := seen[len(seen)-1]
	missed := b.lifecycleAfter(t, last.seq(t))
	if len(missed) != 200 {
		t.Fatalf("the log holds %d events after %s, want 200", len(missed), last.id)
	}
	resumed := b.stream(t, "/v1/events", map[string]string{"Last-Event-ID": last.id})
	wantLog(t, "resumed", resumed.nextN(t, len(missed)), missed)

	live := b.startRun(t, "spawn", parent, nil)
	b.finish(t, p, live, "live")
	<-p.started
	wantLog(t, "live", resumed.nextN(t, 2), b.lifecycleAfter(t, missed[len(missed)-1].ID))
}

// A live /v1/events stream names its starting point before any event: a
// client that loses the connection before the first event resumes from
// there with Last-Event-ID and gets what happened while it was away, not
// the log's end at its reconnection.
func TestEvents_LiveStreamAnchorsItsResumePoint(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	anchor := b.lastID(t)

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.ts.URL+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var first []string
	for sc.Scan() && sc.Text() != "" {
		first = append(first, sc.Text())
	}
	resp.Body.Close() // the connection drops before any event
	if want := []string{"id: " + strconv.FormatInt(anchor, 10)}; !slices.Equal(first, want) {
		t.Fatalf("first frame %q, want the id-only anchor %q", first, want)
	}

	missed := b.startRun(t, "spawn", parent, nil) // while disconnected
	resumed := b.stream(t, "/v1/events", map[string]string{"Last-Event-ID": strconv.FormatInt(anchor, 10)})
	if f := resumed.next(t); f.event != subagent.EventStart || f.lifecycle(t).RunID != missed.RunID {
		t.Fatalf("resumed with frame %+v, want the missed run's start", f)
	}
	p.run(missed.ChildSessionID).complete(t, "done")
}
