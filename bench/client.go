package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// api is a client of the service's HTTP API (api/openapi.yaml).
type api struct {
	base string
	hc   *http.Client
}

// newAPI returns a client that keeps up to conns idle connections, so
// that concurrent clients reuse theirs.
func newAPI(base string, conns int) *api {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true}
	return &api{base: base, hc: &http.Client{Transport: tr}}
}

func (a *api) close() { a.hc.CloseIdleConnections() }

// call sends body as JSON and decodes the answer into out (when non-nil).
// An answer other than want is an error that carries the problem body.
func (a *api) call(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return &statusError{method: method, path: path, status: resp.StatusCode, body: data}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, path, data, err)
		}
	}
	return nil
}

// statusError is an answer with an unexpected status.
type statusError struct {
	method, path string
	status       int
	body         []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.method, e.path, e.status, bytes.TrimSpace(e.body))
}

// problemCode returns the problem+json code of a statusError, or "".
func problemCode(err error) (int, string) {
	var se *statusError
	if !errors.As(err, &se) {
		return 0, ""
	}
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(se.body, &p)
	return se.status, p.Code
}

// text is a prompt of one text block.
func text(s string) []map[string]string {
	return []map[string]string{{"type": "text", "text": s}}
}

// createSession creates a root session and returns its id.
func (a *api) createSession(ctx context.Context, label string) (string, error) {
	var s struct {
		ID string `json:"id"`
	}
	err := a.call(ctx, http.MethodPost, "/v1/sessions", map[string]any{"label": label}, http.StatusCreated, &s)
	return s.ID, err
}

// runOut is the part of a Run (api/openapi.yaml) the bench reads.
type runOut struct {
	RunID          string `json:"runId"`
	ChildSessionID string `json:"childSessionId"`
	State          string `json:"state"`
	Result         *struct {
		StopReason string `json:"stopReason"`
	} `json:"result"`
}

// createRun starts a one-shot spawn run of the echo model; with wait it
// answers once the run settled, and checks that it completed.
func (a *api) createRun(ctx context.Context, parent string, wait bool) (runOut, error) {
	return a.createRunOf(ctx, parent, "hello from the bench", wait)
}

// createRunOf is createRun with the prompt text given.
func (a *api) createRunOf(ctx context.Context, parent, prompt string, wait bool) (runOut, error) {
	path := "/v1/runs"
	if wait {
		path += "?wait=true"
	}
	body := map[string]any{"provider": "spawn", "parentSessionId": parent, "prompt": text(prompt)}
	var r runOut
	if err := a.call(ctx, http.MethodPost, path, body, http.StatusCreated, &r); err != nil {
		return r, err
	}
	if wait && (r.State != "settled" || r.Result == nil || r.Result.StopReason != "completed") {
		return r, fmt.Errorf("run %s: state %q, result %+v: want a completed run", r.RunID, r.State, r.Result)
	}
	return r, nil
}

// frame is one SSE event. data is only valid during the callback.
type frame struct {
	id, event string
	data      []byte
}

// readFrames calls fn for each event of an SSE stream, and for each id-only
// frame, until fn returns false or the stream ends.
func readFrames(r *bufio.Reader, fn func(frame) bool) error {
	var f frame
	var data, long []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer (a large payload): gather it.
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if f.event != "" || f.id != "" || data != nil {
				f.data = data
				if !fn(f) {
					return nil
				}
			}
			f, data = frame{}, data[:0:0]
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("id: ")):
			f.id = string(line[4:])
		case bytes.HasPrefix(line, []byte("event: ")):
			f.event = string(line[7:])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data, line[6:]...)
		}
	}
}

// endEvent is the part of subagent/start and subagent/end data the bench
// reads.
type endEvent struct {
	RunID      string `json:"runId"`
	TaskID     string `json:"taskId"`
	StopReason string `json:"stopReason"`
	typ        string // the frame's event
	at         time.Time
}

// endWatch follows run edges on /v1/events and lets callers wait for the
// subagent/end (or, when subscribed to, the subagent/start) of a run id or
// task id, whether it arrived before or after they asked.
type endWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	seen    map[string]endEvent
	waiters map[string]chan endEvent
	err     error
}

// watchEnds subscribes to the subagent/end events of /v1/events (see
// watchEdges).
func (a *api) watchEnds(ctx context.Context, query string) (*endWatch, error) {
	return a.watchEdges(ctx, []string{"subagent/end"}, query)
}

// watchEdges subscribes to /v1/events (live, the run edges types, narrowed
// by query, e.g. "parentSessionId=…") and returns once the subscription is
// in place: the service sends the headers only after subscribing.
func (a *api) watchEdges(ctx context.Context, types []string, query string) (*endWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	path := a.base + "/v1/events?types=" + strings.Join(types, ",")
	if query != "" {
		path += "&" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("subscribe to /v1/events: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("subscribe to /v1/events: %s", resp.Status)
	}
	w := &endWatch{cancel: cancel, done: make(chan struct{}), seen: map[string]endEvent{}, waiters: map[string]chan endEvent{}}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		err := readFrames(bufio.NewReader(resp.Body), func(f frame) bool {
			at := time.Now()
			if f.event != "subagent/end" && f.event != "subagent/start" {
				return true
			}
			var e endEvent
			if err := json.Unmarshal(f.data, &e); err != nil {
				w.fail(fmt.Errorf("%s data %s: %w", f.event, f.data, err))
				return false
			}
			e.typ, e.at = f.event, at
			w.deliver(e)
			return true
		})
		if err == nil && ctx.Err() == nil {
			err = errors.New("the /v1/events stream ended")
		}
		if ctx.Err() == nil {
			w.fail(err)
		}
	}()
	return w, nil
}

func (w *endWatch) deliver(e endEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range []string{"run:" + e.RunID, "task:" + e.TaskID} {
		if strings.HasSuffix(id, ":") {
			continue // a one-shot run has no task
		}
		key := e.typ + " " + id
		if ch, ok := w.waiters[key]; ok {
			ch <- e
			delete(w.waiters, key)
			continue
		}
		w.seen[key] = e
	}
}

func (w *endWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// run waits for the end of runID.
func (w *endWatch) run(ctx context.Context, runID string) (endEvent, error) {
	return w.wait(ctx, "subagent/end run:"+runID)
}

// task waits for the end of the activation taskID.
func (w *endWatch) task(ctx context.Context, taskID string) (endEvent, error) {
	return w.wait(ctx, "subagent/end task:"+taskID)
}

// taskStarted waits for the start of the activation taskID (of a watch
// subscribed to subagent/start).
func (w *endWatch) taskStarted(ctx context.Context, taskID string) (endEvent, error) {
	return w.wait(ctx, "subagent/start task:"+taskID)
}

// wait returns the run edge filed under key ("subagent/end run:<id>"),
// waiting up to a minute.
func (w *endWatch) wait(ctx context.Context, key string) (endEvent, error) {
	w.mu.Lock()
	if e, ok := w.seen[key]; ok {
		delete(w.seen, key)
		w.mu.Unlock()
		return e, nil
	}
	if w.err != nil {
		w.mu.Unlock()
		return endEvent{}, w.err
	}
	ch := make(chan endEvent, 1)
	w.waiters[key] = ch
	w.mu.Unlock()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case e := <-ch:
		return e, nil
	case <-w.done:
		select {
		case e := <-ch:
			return e, nil
		default:
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return endEvent{}, fmt.Errorf("waiting for the %s: %v", key, w.err)
	case <-t.C:
		return endEvent{}, fmt.Errorf("no %s within a minute", key)
	case <-ctx.Done():
		return endEvent{}, ctx.Err()
	}
}

// close ends the subscription.
func (w *endWatch) close() {
	w.cancel()
	<-w.done
}
