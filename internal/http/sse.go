package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// sseWriter writes Server-Sent Event frames, flushing each and bounding
// each write with a deadline so that a stalled client is cut off.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// startSSE sends the stream's headers and flushes them, so the client knows
// the subscription is in place.
//
// The flush runs on a goroutine of its own: net/http writes the headers on
// the first flush, and that write (chunkWriter.writeHeader) takes about
// 3 KiB of stack. On top of the router's, the middlewares' and the
// handler's frames it would double the handler goroutine's stack to
// 16 KiB, which it keeps for the stream's life: the largest part of what an
// idle subscriber cost (bench scenario 2). Later flushes are shallow.
func (s *Server) startSSE(w http.ResponseWriter) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTO}
	flushed := make(chan error, 1)
	go func() { flushed <- sw.write(nil) }()
	return sw, <-flushed
}

// write writes ps under one write deadline and flushes once.
func (sw *sseWriter) write(ps ...[]byte) error {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	for _, p := range ps {
		if len(p) == 0 {
			continue
		}
		if _, err := sw.w.Write(p); err != nil {
			return err
		}
	}
	return sw.rc.Flush()
}

// event writes one frame. data must be one line of JSON.
func (sw *sseWriter) event(id, typ string, data []byte) error {
	return sw.write(appendFrame(nil, id, typ, data))
}

// items writes a batch of frames. A frame is shared by every subscriber of
// its topic, so it is not copied whole: small frames are gathered into a
// pooled buffer and written together, flushing once per maxWriteBytes
// rather than per frame (per-frame flushes dominated the CPU profile of a
// 5,000-subscriber fan-out, and a bounded write still fits a slow but
// healthy reader inside one write deadline); a frame of largeFrame bytes
// or more is written as it is, after what was gathered before it.
func (sw *sseWriter) items(items []item) error {
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	b := (*bp)[:0]
	defer func() { *bp = b[:0] }()
	for _, it := range items {
		if len(it.frame) >= largeFrame {
			if err := sw.write(b, it.frame); err != nil {
				return err
			}
			b = b[:0]
			continue
		}
		b = append(b, it.frame...)
		if len(b) >= maxWriteBytes {
			if err := sw.write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if len(b) == 0 {
		return nil
	}
	return sw.write(b)
}

// maxWriteBytes bounds the small frames one write (and one write deadline)
// carries; largeFrame is the size from which a frame is written on its own
// (net/http buffers a response in 2 KiB and its connection in 4 KiB: a
// larger write goes through them to the socket without a copy).
const (
	maxWriteBytes = 64 << 10
	largeFrame    = 4 << 10
)

// batchPool holds the buffers items gathers small frames in, so that an
// idle subscriber holds none.
var batchPool = sync.Pool{New: func() any { return new([]byte) }}

// appendFrame appends the SSE frame of one event to b.
func appendFrame(b []byte, id, typ string, data []byte) []byte {
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\nevent: "...)
	b = append(b, oneLine(typ)...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// end clears the write deadline: the connection may serve further requests.
func (sw *sseWriter) end() {
	_ = sw.rc.SetWriteDeadline(time.Time{})
}

// lineBreaks removes the characters that would end an SSE field early.
var lineBreaks = strings.NewReplacer("\r", "", "\n", "")

// oneLine drops line breaks from s.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return lineBreaks.Replace(s)
}

// compactJSON returns raw as one line of JSON ("null" when empty): raw
// itself when it holds no whitespace, as the payloads this service writes
// come back from the in-memory store, else a compacted copy. It returns an
// error for invalid JSON.
func compactJSON(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("null"), nil
	}
	if !bytes.ContainsAny(raw, " \t\r\n") {
		if !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return raw, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// enter registers a stream of ctx's tenant that is about to subscribe, so
// that Shutdown waits for it before it stops the broker's readers. It
// returns DRAINING once Shutdown began, RATE_LIMITED when the tenant has
// MaxStreams open; otherwise call leave when the stream ended.
func (s *Server) enter(ctx context.Context) (leave func(), err error) {
	release, err := s.streamCap.acquire(store.Tenant(ctx), "event streams")
	if err != nil {
		return nil, err
	}
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.closed {
		release()
		return nil, subagent.Errorf(subagent.EDraining, "the server is shutting down")
	}
	s.streams.Add(1)
	return func() { s.streams.Done(); release() }, nil
}

// serve runs one SSE response: it sends the headers, runs body, and logs
// how the stream ended. Errors after the headers cannot be answered; they
// end the stream.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, kind string, body func(sw *sseWriter) error) error {
	gauge := s.metrics.sseClients.WithLabelValues(kind)
	gauge.Inc()
	defer gauge.Dec()

	sw, err := s.startSSE(w)
	if err == nil {
		err = body(sw)
	}
	sw.end()
	req := slog.Group("request", slog.String("method", r.Method), slog.String("uri", r.URL.RequestURI()))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Checked first: net/http cancels the request's context when a
		// write fails, which would make this look like the client leaving.
		s.log.InfoContext(r.Context(), "stream subscriber too slow; disconnected", req)
	case err == nil, r.Context().Err() != nil:
		s.log.DebugContext(r.Context(), "stream ended", req)
	case errors.Is(err, errBehind):
		s.log.InfoContext(r.Context(), "stream subscriber fell behind; disconnected", req)
	default:
		s.log.WarnContext(r.Context(), "stream failed", req, slog.Any("error", err))
	}
	return nil
}

// pump writes sub's items until the client leaves, a write fails, or stop
// is closed or the server shuts down — in the last two cases after sending
// everything the store holds after the cursor. sub may be nil (nothing to
// follow). Heartbeat comments keep idle connections open.
func (s *Server) pump(ctx context.Context, sw *sseWriter, sub *subscription, stop <-chan struct{}) error {
	hb := time.NewTicker(s.heartbeat)
	defer hb.Stop()
	for {
		var wait <-chan struct{}
		if sub != nil {
			items, w, err := sub.poll(ctx)
			if err != nil {
				return err
			}
			if len(items) > 0 {
				if err := sw.items(items); err != nil {
					return err
				}
				continue
			}
			wait = w
		}
		select {
		case <-wait:
		case <-hb.C:
			if err := sw.write([]byte(": heartbeat\n\n")); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return s.flush(ctx, sw, sub)
		case <-s.done:
			return s.flush(ctx, sw, sub)
		}
	}
}

// flush sends what the store holds after sub's cursor.
func (s *Server) flush(ctx context.Context, sw *sseWriter, sub *subscription) error {
	if sub == nil {
		return nil
	}
	for {
		items, err := sub.fromStore(ctx)
		if err != nil || len(items) == 0 {
			return err
		}
		if err := sw.items(items); err != nil {
			return err
		}
	}
}

// Bounds of the /v1/events types filter.
const (
	maxTypes      = 16
	maxTypeLength = 64
)

// streamEvents streams the lifecycle log. Without Last-Event-ID or after
// it starts at the log's current end (live only).
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	after, replay := p.resume(0, 0)
	f := filter{parentID: p.str("parentSessionId", maxIDLength), rootID: p.str("rootSessionId", maxIDLength)}
	if raw := p.str("types", maxTypes*(maxTypeLength+1)); raw != "" {
		f.types = strings.Split(raw, ",")
		if len(f.types) > maxTypes || slices.ContainsFunc(f.types, func(t string) bool { return t == "" || len(t) > maxTypeLength }) {
			p.fail("types", "must list 1 to 16 comma-separated types of 1 to 64 characters")
		}
	}
	if err := p.err(); err != nil {
		return err
	}
	leave, err := s.enter(r.Context())
	if err != nil {
		return err
	}
	defer leave()
	t := s.broker.acquire(store.Tenant(r.Context()), store.LifecycleTopic, lifecycleSource{s.store}, 0, true)
	defer t.release()
	sub := t.subscribe(after, f)
	if !replay {
		if sub, err = t.subscribeLive(r.Context(), f); err != nil {
			return err
		}
	}
	return s.serve(w, r, "events", func(sw *sseWriter) error {
		if !replay {
			// A live stream names its starting point at once with an
			// id-only frame (no event is dispatched): a client that loses
			// the connection before the first event then resumes from here
			// with Last-Event-ID instead of from the end of the log at its
			// reconnection, which would skip what happened in between.
			if err := sw.write([]byte("id: " + strconv.FormatInt(sub.cursor, 10) + "\n\n")); err != nil {
				return err
			}
		}
		return s.pump(r.Context(), sw, sub, nil)
	})
}

// streamSession streams one session's log from Last-Event-ID (else after,
// else the start).
func (s *Server) streamSession(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	after, _ := p.resume(-1, -1)
	if err := p.err(); err != nil {
		return err
	}
	if _, err := s.session(r.Context(), id); err != nil {
		return err
	}
	leave, err := s.enter(r.Context())
	if err != nil {
		return err
	}
	defer leave()
	t := s.broker.acquire(store.Tenant(r.Context()), store.SessionTopic(id), sessionSource{s.store, id}, after, false)
	defer t.release()
	sub := t.subscribe(after, filter{})
	return s.serve(w, r, "session", func(sw *sseWriter) error {
		return s.pump(r.Context(), sw, sub, nil)
	})
}

// resultEventID is the id of a run stream's final frame. A reconnect that
// presents it is answered 204, which makes an EventSource stop.
const resultEventID = "result"

// streamRun streams the child log of a run until it settles, then one
// result frame with the settled run, then ends.
func (s *Server) streamRun(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("runId")
	if r.Header.Get("Last-Event-ID") == resultEventID {
		if err := p.err(); err != nil {
			return err
		}
		if _, err := s.run(r.Context(), id); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	after, _ := p.resume(-1, -1)
	if err := p.err(); err != nil {
		return err
	}
	run, err := s.run(r.Context(), id)
	if err != nil {
		return err
	}
	leave, err := s.enter(r.Context())
	if err != nil {
		return err
	}
	defer leave()
	var sub *subscription
	switch _, err := s.store.GetSession(r.Context(), run.ChildID); {
	case err == nil:
		t := s.broker.acquire(store.Tenant(r.Context()), store.SessionTopic(run.ChildID), sessionSource{s.store, run.ChildID}, after, false)
		defer t.release()
		sub = t.subscribe(after, filter{})
	case !errors.Is(err, store.ErrNotFound):
		return sessionError(run.ChildID, err)
	}

	ctx, cancel := context.WithCancel(r.Context())
	settled := make(chan struct{})
	var final store.Run
	var finalErr error
	go func() {
		defer close(settled)
		final, finalErr = s.untilSettled(ctx, id, nil)
	}()
	defer func() {
		cancel()
		<-settled
	}()
	return s.serve(w, r, "run", func(sw *sseWriter) error {
		if err := s.pump(ctx, sw, sub, settled); err != nil {
			return err
		}
		select {
		case <-settled:
		default:
			return nil // the server is shutting down before the run settled
		}
		if finalErr != nil || final.State == store.StateRunning {
			return finalErr
		}
		data, err := json.Marshal(runOut(final))
		if err != nil {
			return err
		}
		return sw.event(resultEventID, "result", data)
	})
}
