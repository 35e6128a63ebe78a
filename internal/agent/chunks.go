package agent

import "github.com/subagentd/subagentd/internal/sessionlog"

// maxChunkBatch bounds one group commit of stream deltas.
const maxChunkBatch = 256

// chunkWriter appends one step's assistant/chunk events in the background
// and group-commits whatever queued up while the previous append ran: a
// model streaming hundreds of deltas costs a few store commits rather than
// hundreds (each a Postgres transaction with its NOTIFY), while a store
// that keeps up still gets every delta as soon as it arrives. Order is
// kept: events are appended in the order they were written.
type chunkWriter struct {
	a    *Agent
	ch   chan sessionlog.Entry
	done chan struct{}
	err  error // the first append error; read after close
}

func (a *Agent) newChunkWriter() *chunkWriter {
	w := &chunkWriter{a: a, ch: make(chan sessionlog.Entry, maxChunkBatch), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *chunkWriter) run() {
	defer close(w.done)
	for ev := range w.ch {
		batch := []sessionlog.Entry{ev}
	drain:
		for len(batch) < maxChunkBatch {
			select {
			case next, ok := <-w.ch:
				if !ok {
					break drain
				}
				batch = append(batch, next)
			default:
				break drain
			}
		}
		if w.err == nil { // after a failure the step fails; drop the rest
			w.err = w.a.append(batch...)
		}
	}
}

// write queues ev; it blocks only while maxChunkBatch events wait.
func (w *chunkWriter) write(ev sessionlog.Entry) { w.ch <- ev }

// close waits until every queued event was appended and returns the first
// append error.
func (w *chunkWriter) close() error {
	close(w.ch)
	<-w.done
	return w.err
}
