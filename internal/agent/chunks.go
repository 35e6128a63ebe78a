package agent

import (
	"sync"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

// maxChunkBatch bounds one group commit of stream deltas.
const maxChunkBatch = 256

// chunkWriter appends one step's assistant/chunk events in the background
// and group-commits whatever queued up while the previous append ran: a
// model streaming hundreds of deltas costs a few store commits rather than
// hundreds (each a Postgres transaction with its NOTIFY), while a store
// that keeps up still gets every delta as soon as it arrives. Order is
// kept: events are appended in the order they were written.
//
// The queue is a slice that grows with what waits, not a channel of
// maxChunkBatch events: that channel cost 18 KiB per model step, a quarter
// of the bytes an echo run allocated.
type chunkWriter struct {
	a    *Agent
	done chan struct{}
	err  error // the first append error; read after done

	mu     sync.Mutex
	cond   *sync.Cond // signals queued events, room in the queue, close
	queue  []sessionlog.Entry
	closed bool
}

func (a *Agent) newChunkWriter() *chunkWriter {
	w := &chunkWriter{a: a, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

func (w *chunkWriter) run() {
	defer close(w.done)
	w.mu.Lock()
	for {
		for len(w.queue) == 0 && !w.closed {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			return
		}
		batch := w.queue
		w.queue = nil
		w.cond.Broadcast() // room for a blocked write
		w.mu.Unlock()
		if w.err == nil { // after a failure the step fails; drop the rest
			w.err = w.a.append(batch...)
		}
		w.mu.Lock()
	}
}

// write queues ev; it blocks only while maxChunkBatch events wait.
func (w *chunkWriter) write(ev sessionlog.Entry) {
	w.mu.Lock()
	for len(w.queue) >= maxChunkBatch {
		w.cond.Wait()
	}
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	w.cond.Broadcast()
}

// close waits until every queued event was appended and returns the first
// append error.
func (w *chunkWriter) close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
	<-w.done
	return w.err
}
