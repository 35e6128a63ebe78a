package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Methods whose order order keeps.
const (
	methodSessionUpdate     = "session/update"
	methodRequestPermission = "session/request_permission"
)

// overtakeBound bounds how long a permission request waits for the
// session updates that came before it. They are handled one by one as
// they come, so the wait is normally what handling them takes; the bound
// only keeps a request from waiting on an update the connection dropped
// (one whose params it could not read never reaches the client).
const overtakeBound = 2 * time.Second

// order puts each permission request of an agent after the session
// updates the agent sent before it. The SDK handles the updates one at a
// time, in order, but each request on a goroutine of its own, so a
// request can overtake the updates ahead of it: an agent that announces a
// tool call and then asks to run it would have the request logged before
// the call. order reads the agent's output as it passes to the SDK and
// notes how many updates came before the latest permission request; a
// request waits (wait) until the client has handled that many (handled).
// The SDK reads a request's line before it hands the request to the
// client, so that count covers the updates before the waiting request;
// with requests in flight at once it may cover those before a later one
// too, which costs a wait, never a deadlock: those updates were read
// already, and handling them waits for no request.
type order struct {
	r       io.Reader
	partial []byte // the start of a line not read to its end yet

	mu      sync.Mutex
	read    uint64        // session updates read
	before  uint64        // session updates read before the latest permission request
	done    uint64        // session updates the client handled
	changed chan struct{} // closed when done grows
}

func newOrder(r io.Reader) *order {
	return &order{r: r, changed: make(chan struct{})}
}

// Read reads from the agent's output and notes the messages it completes.
func (o *order) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	chunk := p[:n]
	for {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			o.partial = append(o.partial, chunk...)
			return n, err
		}
		line := chunk[:i]
		if len(o.partial) > 0 {
			line = append(o.partial, line...)
		}
		o.note(line)
		o.partial = o.partial[:0]
		chunk = chunk[i+1:]
	}
}

// note counts a line that is a session update and marks one that is a
// permission request; other lines (and lines that are not JSON) count as
// neither, as the SDK does not hand them to the client either.
func (o *order) note(line []byte) {
	var m struct {
		ID     *json.RawMessage `json:"id"`
		Method string           `json:"method"`
	}
	if json.Unmarshal(line, &m) != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case m.ID == nil && m.Method == methodSessionUpdate:
		o.read++
	case m.ID != nil && m.Method == methodRequestPermission:
		o.before = o.read
	}
}

// handled records that the client handled one session update.
func (o *order) handled() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done++
	close(o.changed)
	o.changed = make(chan struct{})
}

// wait returns once the session updates read before the latest
// permission request are handled, ctx ends (the connection closed) or
// overtakeBound passed.
func (o *order) wait(ctx context.Context) {
	o.mu.Lock()
	want := o.before
	o.mu.Unlock()
	timeout := time.NewTimer(overtakeBound)
	defer timeout.Stop()
	for {
		o.mu.Lock()
		done, changed := o.done, o.changed
		o.mu.Unlock()
		if done >= want {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		}
	}
}
