package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The SSE baseline of scenarios 2 and 8 is the least a Go server must do
// to fan lifecycle events out: a standard-library http.Server whose /events
// handlers each own a buffered channel, and a POST /runs that frames one
// subagent/start and one subagent/end (the service's payload shape; with a
// prompt in the body, the end carries it as lastAssistantMessage, as an
// echo run's does) once and hands them to every channel, cutting off a
// subscriber whose channel is full. The last baselineReplay frames are kept
// in a slice, so that a reconnect with Last-Event-ID gets what it missed
// (scenario 8). No store. It runs as a subprocess of the bench (the same
// executable with -serve-sse-baseline) so that its memory per subscriber is
// read like the service's, without the bench's clients.

// broadcaster is the baseline's subscriber set and its recent frames.
type broadcaster struct {
	mu     sync.Mutex
	subs   map[chan []byte]struct{}
	seq    int64
	recent []idFrame // ascending ids, at most baselineReplay
}

// idFrame is one built frame and its id.
type idFrame struct {
	id    int64
	frame []byte
}

// Limits of the baseline, matching the service's defaults (internal/http).
const (
	baselineHeartbeat    = 15 * time.Second
	baselineWriteTimeout = 10 * time.Second
	baselineBuffer       = 256
	// baselineReplay is how many recent frames a reconnect can get, the
	// service's default ring size (internal/http).
	baselineReplay = 1024
)

// serveEvents subscribes, then sends the headers: a client that has them
// gets every later frame. With Last-Event-ID it first gets the kept frames
// after that id; without, an id-only frame naming the newest id, as the
// service sends.
func (b *broadcaster) serveEvents(w http.ResponseWriter, r *http.Request) {
	last, resume := int64(0), false
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil {
			http.Error(w, "bad Last-Event-ID", http.StatusBadRequest)
			return
		}
		last, resume = n, true
	}
	ch := make(chan []byte, baselineBuffer)
	var replay [][]byte
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	if resume {
		i, _ := slices.BinarySearchFunc(b.recent, last+1, func(f idFrame, id int64) int { return cmp.Compare(f.id, id) })
		for _, f := range b.recent[i:] {
			replay = append(replay, f.frame)
		}
	} else {
		replay = append(replay, fmt.Appendf(nil, "id: %d\n\n", b.seq))
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(p ...[]byte) error {
		if err := rc.SetWriteDeadline(time.Now().Add(baselineWriteTimeout)); err != nil {
			return err
		}
		for _, f := range p {
			if _, err := w.Write(f); err != nil {
				return err
			}
		}
		return rc.Flush()
	}
	if write(replay...) != nil {
		return
	}
	hb := time.NewTicker(baselineHeartbeat)
	defer hb.Stop()
	for {
		var err error
		select {
		case f, ok := <-ch:
			if !ok {
				return // too slow: cut off
			}
			err = write(f)
		case <-hb.C:
			err = write([]byte(": heartbeat\n\n"))
		case <-r.Context().Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// publish keeps frames, whose ids follow the newest kept, and hands them to
// every subscriber; a full channel is closed. The caller holds b.mu, under
// which it took the ids.
func (b *broadcaster) publish(frames ...idFrame) {
	b.recent = append(b.recent, frames...)
	if over := len(b.recent) - baselineReplay; over > 0 {
		b.recent = slices.Delete(b.recent, 0, over)
	}
	for ch := range b.subs {
		for _, f := range frames {
			select {
			case ch <- f.frame:
				continue
			default:
			}
			close(ch)
			delete(b.subs, ch)
			break
		}
	}
}

// publishRun broadcasts the start and end of a made-up run and answers
// 201 {runId}. A body's prompt (a run request's) is the end's
// lastAssistantMessage.
func (b *broadcaster) publishRun(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	run, child := rand.Text(), rand.Text()
	start, err := json.Marshal(map[string]any{"runId": run, "provider": "spawn", "id": child, "local": true, "parentSessionId": "bench"})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	end := append(start[:len(start)-1:len(start)-1], `,"stopReason":"completed"`...)
	if len(req.Prompt) > 0 {
		end = append(append(end, `,"lastAssistantMessage":`...), req.Prompt...)
	}
	end = append(end, '}')
	b.mu.Lock()
	b.seq += 2
	id := b.seq
	b.publish(
		idFrame{id - 1, fmt.Appendf(nil, "id: %d\nevent: subagent/start\ndata: %s\n\n", id-1, start)},
		idFrame{id, fmt.Appendf(nil, "id: %d\nevent: subagent/end\ndata: %s\n\n", id, end)})
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"runId":%q}`, run)
}

// serveBaselineSSE serves the baseline on a free loopback port, writes the
// address as the first line of stdout, and serves until stdin ends or
// SIGTERM arrives.
func serveBaselineSSE(stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b := &broadcaster{subs: map[chan []byte]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
	mux.HandleFunc("GET /events", b.serveEvents)
	mux.HandleFunc("POST /runs", b.publishRun)
	mux.HandleFunc("DELETE /runs/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// The a2a-style task floor of scenario 5.
	ts := &taskStore{tasks: map[string]*task{}}
	mux.HandleFunc("POST /v1/sessions", ts.createSession)
	mux.HandleFunc("POST /v1/runs", ts.createRun)
	mux.HandleFunc("DELETE /v1/runs/{id}", ts.disposeRun)
	mux.Handle("POST /a2a", a2aPeer())
	srv := &http.Server{Handler: mux}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintln(stdout, ln.Addr()); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-sig:
	case <-eof:
	case err := <-served:
		return err
	}
	return srv.Close()
}

// startBaseline runs this executable as the SSE baseline and waits until
// it serves.
func (b *bench) startBaseline(ctx context.Context) (*proc, error) {
	p := &proc{name: "sse-baseline"}
	p.cmd = exec.Command(b.self, "-serve-sse-baseline")
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Keep stdin open: its end tells the baseline to stop when the bench
	// dies without signalling it.
	if _, err := p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, fmt.Errorf("start the SSE baseline: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read the SSE baseline's address: %w", err), p.stop())
	}
	p.base = "http://" + strings.TrimSpace(line)
	if err := p.waitReady(ctx, p.base+"/readyz"); err != nil {
		_ = p.stop() // err already says why
		return nil, err
	}
	return p, nil
}
