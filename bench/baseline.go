package main

import (
	"bufio"
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
	"strings"
	"sync"
	"syscall"
	"time"
)

// The SSE baseline of scenario 2 is the least a Go server must do to fan
// lifecycle events out: a standard-library http.Server whose /events
// handlers each own a buffered channel, and a POST /runs that frames one
// subagent/start and one subagent/end (the service's payload shape) once
// and hands them to every channel, cutting off a subscriber whose channel
// is full. No store, no ring, no replay. It runs as a subprocess of the
// bench (the same executable with -serve-sse-baseline) so that its memory
// per subscriber is read like the service's, without the bench's clients.

// broadcaster is the baseline's subscriber set.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
	seq  int64
}

// Limits of the baseline, matching the service's defaults (internal/http).
const (
	baselineHeartbeat    = 15 * time.Second
	baselineWriteTimeout = 10 * time.Second
	baselineBuffer       = 256
)

// serveEvents subscribes, then sends the headers: a client that has them
// gets every later frame.
func (b *broadcaster) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, baselineBuffer)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
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
	if rc.Flush() != nil {
		return
	}
	hb := time.NewTicker(baselineHeartbeat)
	defer hb.Stop()
	write := func(p []byte) error {
		if err := rc.SetWriteDeadline(time.Now().Add(baselineWriteTimeout)); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		return rc.Flush()
	}
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

// publish hands frames to every subscriber; a full channel is closed.
func (b *broadcaster) publish(frames ...[]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		for _, f := range frames {
			select {
			case ch <- f:
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
// 201 {runId}.
func (b *broadcaster) publishRun(w http.ResponseWriter, _ *http.Request) {
	run, child := rand.Text(), rand.Text()
	start, err := json.Marshal(map[string]any{"runId": run, "provider": "spawn", "id": child, "local": true, "parentSessionId": "bench"})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	end := append(start[:len(start)-1:len(start)-1], `,"stopReason":"completed"}`...)
	b.mu.Lock()
	b.seq += 2
	id := b.seq
	b.mu.Unlock()
	b.publish(
		fmt.Appendf(nil, "id: %d\nevent: subagent/start\ndata: %s\n\n", id-1, start),
		fmt.Appendf(nil, "id: %d\nevent: subagent/end\ndata: %s\n\n", id, end))
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
