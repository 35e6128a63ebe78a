package http

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// lifecycleData is the data of subagent/start and subagent/end frames.
type lifecycleData struct {
	RunID                string            `json:"runId"`
	Provider             string            `json:"provider"`
	ID                   string            `json:"id"`
	Local                bool              `json:"local"`
	ParentSessionID      string            `json:"parentSessionId"`
	StopReason           string            `json:"stopReason"`
	LastAssistantMessage []json.RawMessage `json:"lastAssistantMessage"`
}

func (f frame) lifecycle(t *testing.T) lifecycleData {
	t.Helper()
	var d lifecycleData
	if err := json.Unmarshal(f.data, &d); err != nil {
		t.Fatalf("frame %s: %v", f.id, err)
	}
	return d
}

func (f frame) seq(t *testing.T) int64 {
	t.Helper()
	n, err := strconv.ParseInt(f.id, 10, 64)
	if err != nil {
		t.Fatalf("frame id %q: %v", f.id, err)
	}
	return n
}

// TestEvents_LiveOnly: without Last-Event-ID or after, the stream starts at
// the end of the lifecycle log.
func TestEvents_LiveOnly(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	before := b.startRun(t, "spawn", parent, nil)

	s := b.stream(t, "/v1/events", nil)
	run := b.startRun(t, "spawn", parent, map[string]any{"label": "second"})
	start := s.next(t)
	d := start.lifecycle(t)
	if start.event != subagent.EventStart || d.RunID != run.RunID || d.ID != run.ChildSessionID || !d.Local ||
		d.Provider != "spawn" || d.ParentSessionID != parent {
		t.Fatalf("first frame %+v data %+v", start, d)
	}
	p.run(run.ChildSessionID).complete(t, "answer")
	end := s.next(t)
	e := end.lifecycle(t)
	if end.event != subagent.EventEnd || e.RunID != run.RunID || e.StopReason != subagent.StopCompleted ||
		len(e.LastAssistantMessage) != 1 || end.seq(t) <= start.seq(t) {
		t.Fatalf("second frame %+v data %+v", end, e)
	}
	p.run(before.ChildSessionID).complete(t, "first")
	if f := s.next(t); f.lifecycle(t).RunID != before.RunID || f.event != subagent.EventEnd {
		t.Fatalf("third frame %+v", f)
	}
}

// TestEvents_R14_ReplayExactlyOnce: a reconnect with Last-Event-ID gets
// every later event once, in order, then live ones; start precedes end.
func TestEvents_R14_ReplayExactlyOnce(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	parent := b.rootSession(t)
	var runs []runJSON
	for i := range 3 {
		r := b.startRun(t, "spawn", parent, nil)
		runs = append(runs, r)
		b.finish(t, p, r, "r"+strconv.Itoa(i))
	}
	// provider-added(spawn), then start+end of each run
	all := b.stream(t, "/v1/events?after=0", nil)
	var frames []frame
	for range 7 {
		frames = append(frames, all.next(t))
	}
	if frames[0].event != subagent.EventProviderAdded {
		t.Fatalf("first frame %+v", frames[0])
	}
	for i, r := range runs {
		s, e := frames[1+2*i], frames[2+2*i]
		if s.event != subagent.EventStart || e.event != subagent.EventEnd || s.lifecycle(t).RunID != r.RunID || e.lifecycle(t).RunID != r.RunID {
			t.Fatalf("frames of run %d: %+v %+v", i, s, e)
		}
	}
	for i := 1; i < len(frames); i++ {
		if frames[i].seq(t) <= frames[i-1].seq(t) {
			t.Fatalf("ids not increasing: %s then %s", frames[i-1].id, frames[i].id)
		}
	}

	// Last-Event-ID wins over after.
	resumed := b.stream(t, "/v1/events?after=0", map[string]string{"Last-Event-ID": frames[3].id})
	for _, want := range frames[4:] {
		if got := resumed.next(t); got.id != want.id || got.event != want.event || string(got.data) != string(want.data) {
			t.Fatalf("resumed frame %+v, want %+v", got, want)
		}
	}
	live := b.startRun(t, "spawn", parent, nil)
	for _, s := range []*sseStream{all, resumed} {
		if f := s.next(t); f.event != subagent.EventStart || f.lifecycle(t).RunID != live.RunID {
			t.Fatalf("live frame %+v", f)
		}
	}
	p.run(live.ChildSessionID).complete(t, "done")
}

func TestEvents_Filters(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	a, other := b.rootSession(t), b.rootSession(t)
	ra := b.startRun(t, "spawn", a, nil)
	ro := b.startRun(t, "spawn", other, nil)
	b.finish(t, p, ro, "x")
	b.finish(t, p, ra, "y")

	byParent := b.stream(t, "/v1/events?after=0&parentSessionId="+a, nil)
	for _, want := range []string{subagent.EventStart, subagent.EventEnd} {
		if f := byParent.next(t); f.event != want || f.lifecycle(t).ParentSessionID != a {
			t.Fatalf("frame %+v, want %s of %s", f, want, a)
		}
	}
	ends := b.stream(t, "/v1/events?after=0&types=subagent/end,subagent/provider-removed", nil)
	for _, want := range []string{ro.RunID, ra.RunID} {
		if f := ends.next(t); f.event != subagent.EventEnd || f.lifecycle(t).RunID != want {
			t.Fatalf("frame %+v, want end of %s", f, want)
		}
	}
	// Live events are filtered the same way.
	rb := b.startRun(t, "spawn", other, nil)
	ra2 := b.startRun(t, "spawn", a, nil)
	if f := byParent.next(t); f.lifecycle(t).RunID != ra2.RunID {
		t.Fatalf("frame %+v, want start of %s", f, ra2.RunID)
	}
	p.run(rb.ChildSessionID).complete(t, "x")
	if f := ends.next(t); f.lifecycle(t).RunID != rb.RunID {
		t.Fatalf("frame %+v, want end of %s", f, rb.RunID)
	}
	p.run(ra2.ChildSessionID).complete(t, "x")
}

// TestEvents_MalformedResume: a Last-Event-ID or after that is not a valid
// position is 400, not a silent replay from the start.
func TestEvents_MalformedResume(t *testing.T) {
	b := setup(t)
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/events", header: map[string]string{"Last-Event-ID": "abc"}})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/events?after=-1", invalid: true})
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/events?types=a,,b"})
	id := b.rootSession(t)
	b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions/" + id + "/stream", header: map[string]string{"Last-Event-ID": "1.5"}})
	b.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, call{method: http.MethodGet, path: "/v1/sessions/nope/stream"})
	b.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, call{method: http.MethodGet, path: "/v1/runs/nope/stream"})
}

func TestEvents_Heartbeat(t *testing.T) {
	b := setup(t, func(c *Config) { c.Heartbeat = 10 * time.Millisecond })
	s := b.stream(t, "/v1/events", nil)
	if f := s.nextFrame(t); f.comment != "heartbeat" {
		t.Fatalf("frame %+v, want a heartbeat comment", f)
	}
}

// TestSessionStream_ReplayThenLive: the log from the start, then appended
// events live; a reconnect resumes after Last-Event-ID.
func TestSessionStream_ReplayThenLive(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	fr := p.run(run.ChildSessionID)
	fr.logEvent(t, sessionlog.EventTurnStart, sessionlog.TurnData{Turn: 1})

	s := b.stream(t, "/v1/sessions/"+run.ChildSessionID+"/stream", nil)
	for i, want := range []string{sessionlog.EventDescriptor, sessionlog.EventUserMessage, sessionlog.EventTurnStart} {
		f := s.next(t)
		var env sessionEventJSON
		if err := json.Unmarshal(f.data, &env); err != nil {
			t.Fatal(err)
		}
		if f.id != strconv.Itoa(i) || f.event != want || env.Seq != int64(i) || env.Type != want {
			t.Fatalf("frame %d = %+v", i, f)
		}
	}
	fr.logEvent(t, sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: 1, Step: 1, Chunk: sessionlog.Chunk{Type: "text-delta", Text: "hel"}})
	if f := s.next(t); f.id != "3" || f.event != sessionlog.EventAssistantChunk {
		t.Fatalf("live frame %+v", f)
	}
	resumed := b.stream(t, "/v1/sessions/"+run.ChildSessionID+"/stream?after=0", map[string]string{"Last-Event-ID": "2"})
	if f := resumed.next(t); f.id != "3" {
		t.Fatalf("resumed at %+v", f)
	}
	fr.logEvent(t, sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: 1, Step: 1, Chunk: sessionlog.Chunk{Type: "text-delta", Text: "lo"}})
	for _, st := range []*sseStream{s, resumed} {
		if f := st.next(t); f.id != "4" {
			t.Fatalf("frame %+v, want seq 4", f)
		}
	}
	fr.complete(t, "hello")
}

// TestSessionStream_NoGapNoDuplicate: subscribers that join while events
// are appended, with a ring far smaller than the log, receive every seq
// exactly once and in order, resuming with Last-Event-ID when cut off.
func TestSessionStream_NoGapNoDuplicate(t *testing.T) {
	b := setup(t, func(c *Config) { c.RingSize = 8 })
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	fr := p.run(run.ChildSessionID)
	const total = 600 // 2 events from Start, then appended ones
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 2; i < total; i += 3 {
			evs := make([]store.NewEvent, min(3, total-i))
			for j := range evs {
				evs[j] = store.NewEvent{Type: "turn/start", Data: json.RawMessage(`{"turn":` + strconv.Itoa(i+j) + `}`)}
			}
			if _, err := b.st.AppendEvents(fr.ctx, fr.childID, evs...); err != nil {
				t.Errorf("append: %v", err)
				return
			}
		}
	}()
	_, router := spec(t)
	probe, _ := http.NewRequest(http.MethodGet, "/v1/sessions/x/stream", nil)
	route, _, err := router.FindRoute(probe)
	if err != nil {
		t.Fatal(err)
	}
	schemas := sseSchemas(t, route)
	var subs sync.WaitGroup
	results := make([][]int64, 4)
	errs := make([]error, 4)
	for k := range results {
		subs.Add(1)
		go func() {
			defer subs.Done()
			results[k], errs[k] = readAll(b, run.ChildSessionID, total, schemas)
		}()
	}
	wg.Wait()
	subs.Wait()
	for k, seqs := range results {
		if errs[k] != nil {
			t.Fatalf("subscriber %d: %v", k, errs[k])
		}
		if len(seqs) != total {
			t.Fatalf("subscriber %d got %d events", k, len(seqs))
		}
		for i, seq := range seqs {
			if seq != int64(i) {
				t.Fatalf("subscriber %d: event %d has seq %d", k, i, seq)
			}
		}
	}
	fr.complete(t, "done")
}

// readAll reads the session stream until it has total events, validating
// each frame against schemas and reconnecting with Last-Event-ID whenever
// the server ends the stream. It runs off the test goroutine, so it returns
// its failure instead of reporting it.
func readAll(b *testBundle, sessionID string, total int, schemas map[string]*openapi3.Schema) ([]int64, error) {
	var seqs []int64
	for len(seqs) < total {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, b.ts.URL+"/v1/sessions/"+sessionID+"/stream", nil)
		if err != nil {
			return seqs, err
		}
		if len(seqs) > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(seqs[len(seqs)-1], 10))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return seqs, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return seqs, fmt.Errorf("status %d", resp.StatusCode)
		}
		s := &sseStream{resp: resp, frames: make(chan frame, 64), done: make(chan error, 1), cancel: func() {}}
		go s.read(schemas)
		for f := range s.frames {
			if f.comment != "" {
				continue
			}
			n, err := strconv.ParseInt(f.id, 10, 64)
			if err != nil {
				resp.Body.Close()
				return seqs, err
			}
			seqs = append(seqs, n)
			if len(seqs) == total {
				break
			}
		}
		resp.Body.Close()
		if len(seqs) < total {
			if err := <-s.done; err != io.EOF {
				return seqs, err
			}
		}
	}
	return seqs, nil
}

// TestRunStream_LogThenResult: the child's log, then one result frame with
// the settled run, then the end of the stream; a reconnect presenting the
// result's id is answered 204.
func TestRunStream_LogThenResult(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	fr := p.run(run.ChildSessionID)
	s := b.stream(t, "/v1/runs/"+run.RunID+"/stream", nil)
	if f := s.next(t); f.id != "0" || f.event != sessionlog.EventDescriptor {
		t.Fatalf("frame %+v", f)
	}
	if f := s.next(t); f.id != "1" || f.event != sessionlog.EventUserMessage {
		t.Fatalf("frame %+v", f)
	}
	fr.complete(t, "the answer")
	if f := s.next(t); f.id != "2" || f.event != sessionlog.EventAssistantMessage {
		t.Fatalf("frame %+v", f)
	}
	res := s.next(t)
	var got runJSON
	if err := json.Unmarshal(res.data, &got); err != nil {
		t.Fatal(err)
	}
	if res.id != resultEventID || res.event != "result" || got.State != store.StateSettled || got.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("result frame %+v", res)
	}
	if rest := s.end(t); len(rest) != 0 {
		t.Fatalf("frames after the result: %+v", rest)
	}
	b.want(t, http.StatusNoContent, call{method: http.MethodGet, path: "/v1/runs/" + run.RunID + "/stream", header: map[string]string{"Last-Event-ID": resultEventID}})

	// Once settled, the stream replays the rest of the log and ends.
	again := b.stream(t, "/v1/runs/"+run.RunID+"/stream", map[string]string{"Last-Event-ID": "1"})
	if f := again.next(t); f.id != "2" {
		t.Fatalf("frame %+v", f)
	}
	if f := again.next(t); f.id != resultEventID {
		t.Fatalf("frame %+v", f)
	}
	again.end(t)
}

// TestRunStream_Remote: a run without a local child log streams only its
// result.
func TestRunStream_Remote(t *testing.T) {
	b := setup(t)
	p := b.register(t, &fakeProvider{name: "acp"})
	run := b.startRun(t, "acp", b.rootSession(t), nil)
	s := b.stream(t, "/v1/runs/"+run.RunID+"/stream", nil)
	p.run(run.ChildSessionID).Cancel()
	f := s.next(t)
	var got runJSON
	if err := json.Unmarshal(f.data, &got); err != nil {
		t.Fatal(err)
	}
	if f.id != resultEventID || got.Local || got.Result.StopReason != subagent.StopAborted {
		t.Fatalf("frame %+v", f)
	}
	s.end(t)
}

// TestShutdown_StreamsCarryFinalEnds: Service.Shutdown settles live runs;
// Server.Shutdown then ends every stream after it delivered what is stored
// (the runs' subagent/end included) and refuses new streams.
func TestShutdown_StreamsCarryFinalEnds(t *testing.T) {
	b := setup(t)
	b.register(t, &fakeProvider{name: "spawn", caps: allCaps(), local: true})
	run := b.startRun(t, "spawn", b.rootSession(t), nil)
	events := b.stream(t, "/v1/events", nil)
	session := b.stream(t, "/v1/sessions/"+run.ChildSessionID+"/stream?after=1", nil)

	ctx := t.Context()
	if err := b.svc.Shutdown(ctx); err != nil {
		t.Fatalf("service shutdown: %v", err)
	}
	if err := b.srv.Shutdown(ctx); err != nil {
		t.Fatalf("server shutdown: %v", err)
	}
	rest := events.end(t)
	if len(rest) != 1 || rest[0].event != subagent.EventEnd || rest[0].lifecycle(t).StopReason != subagent.StopAborted {
		t.Fatalf("events after shutdown: %+v", rest)
	}
	session.end(t)
	b.wantProblem(t, http.StatusServiceUnavailable, subagent.EDraining, call{method: http.MethodGet, path: "/v1/events"})
	b.wantProblem(t, http.StatusServiceUnavailable, subagent.EDraining, call{method: http.MethodGet, path: "/readyz"})
}

// discardWriter is a ResponseWriter that keeps nothing, for benchmarks of
// what a stream's writes cost the server itself.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkSSEItems_LargeEvent is one subscriber's write of an event whose
// data is 160 KiB (a subagent/end carrying a long lastAssistantMessage),
// and of a batch of small events: the bytes it allocates and copies are
// paid once per subscriber.
func BenchmarkSSEItems_LargeEvent(b *testing.B) {
	data := []byte(`{"lastAssistantMessage":[{"type":"text","text":"` + strings.Repeat("x", 160<<10) + `"}]}`)
	small := []byte(`{"runId":"r","provider":"spawn"}`)
	for _, bc := range []struct {
		name  string
		items []item
	}{
		{"one-160KiB", []item{newItem(1, "subagent/end", "p", "r", data)}},
		{"64-small", func() (its []item) {
			for i := range 64 {
				its = append(its, newItem(int64(i), "subagent/start", "p", "r", small))
			}
			return its
		}()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sw := &sseWriter{w: &discardWriter{h: http.Header{}}, timeout: time.Second}
			sw.rc = http.NewResponseController(sw.w)
			b.ReportAllocs()
			for b.Loop() {
				if err := sw.items(bc.items); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
