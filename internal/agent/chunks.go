package agent

import (
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

const (
	// maxChunkBatch bounds one group commit of stream deltas.
	maxChunkBatch = 256
	// defaultChunkLinger is Config.ChunkLinger when it is 0: how long a delta waits for the ones after it before
	// they are appended together. A model that streams for longer gets its
	// deltas into the log within about this long of their arrival; one that
	// is done sooner (a short answer, an echo) appends none of them on its
	// own: they go in the step's last append, with its message and the
	// turn's end, which for a one-shot run is the settlement's commit.
	defaultChunkLinger = 2 * time.Millisecond
)

// chunkWriter appends one step's assistant/chunk events in the background,
// group-committing whatever queued up during the linger and while the
// previous append ran: a model streaming hundreds of deltas costs a few
// store commits rather than hundreds (each a Postgres transaction with its
// wake-up), and a short stream costs none of its own. Order is kept: events
// are appended in the order they were written, and close hands back the
// ones still queued for the caller to append next.
//
// No goroutine waits for deltas: the first one queued arms a timer, whose
// function appends. The queue is a slice that grows with what waits, not a
// channel of maxChunkBatch events: that channel cost 18 KiB per model
// step, a quarter of the bytes an echo run allocated.
type chunkWriter struct {
	a      *Agent
	linger time.Duration

	mu       sync.Mutex
	cond     *sync.Cond // signals the end of an append: room in the queue, or no append running
	queue    []sessionlog.Entry
	timer    *time.Timer // armed while queued events linger
	armed    bool
	flushing bool  // an append runs
	closed   bool  // close was called: nothing more is appended here
	err      error // the first append error
}

func (a *Agent) newChunkWriter() *chunkWriter {
	w := &chunkWriter{a: a, linger: a.cfg.ChunkLinger}
	if w.linger == 0 {
		w.linger = defaultChunkLinger
	}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// write queues ev; it blocks only while maxChunkBatch events wait, until
// an append takes them.
func (w *chunkWriter) write(ev sessionlog.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return // the step fails: nothing more is logged
	}
	for len(w.queue) >= maxChunkBatch {
		if w.armed && w.timer.Stop() {
			w.armed = false
			go w.flush() // a full batch does not linger
		}
		w.cond.Wait()
	}
	w.queue = append(w.queue, ev)
	if w.flushing || w.armed {
		return // the running append, or the armed timer, takes it
	}
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.linger, w.flush)
	} else {
		w.timer.Reset(w.linger)
	}
}

// flush appends what is queued, batch after batch, until the queue is
// empty, close was called or an append failed.
func (w *chunkWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.closed || w.flushing {
		return
	}
	w.flushing = true
	for len(w.queue) > 0 && !w.closed && w.err == nil {
		batch := w.queue
		w.queue = nil
		w.cond.Broadcast() // room for a blocked write
		w.mu.Unlock()
		err := w.a.append(batch...)
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
	}
	w.flushing = false
	w.cond.Broadcast()
}

// close stops the writer once a running append ended, and returns the
// events still queued, which the caller must append after everything
// appended here, and the first append error (after which the step fails,
// and what is queued is not returned).
func (w *chunkWriter) close() ([]sessionlog.Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.armed {
		w.timer.Stop() // a timer that fired already finds closed set
		w.armed = false
	}
	for w.flushing {
		w.cond.Wait()
	}
	if w.err != nil {
		return nil, w.err
	}
	rest := w.queue
	w.queue = nil
	return rest, nil
}
