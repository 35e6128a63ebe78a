package pg

import (
	"bytes"
	"cmp"
	"slices"
	"sync"

	"github.com/subagentd/subagentd/internal/store"
)

// recentSize is how many lifecycle events recent keeps at least, once it
// has committed that many; it holds at most twice as many, dropping the
// older half at once, so that an insert copies no more than a few events
// on average.
const recentSize = 1024

// recentBytes bounds the payloads recent keeps, whatever their count:
// events of 160 KiB (an answer in each subagent/end) would otherwise keep
// 2 × recentSize of them. Beyond it the oldest go, as beyond the count.
const recentBytes = 16 << 20

// recent holds the lifecycle events this Store's writer committed lately,
// as the table holds them, so that Lifecycle answers a subscriber that is
// up to date — the /v1/events stream woken by this replica's own commit —
// without a round trip. It answers only when it can prove the answer is
// what the table would give:
//
//   - Every id in (After, newest held] must be held. Ids are global and
//     become visible in commit order (writer.go), so a missing one is a
//     commit of another replica, or one of ours not answered yet: the read
//     goes to the table.
//   - No commit of another replica may be newer than what it proves
//     absent. Another replica's commit is known only by its wake-up (or
//     not at all, if that was lost): each foreign lifecycle wake-up, the
//     listener's reconnect and every poll tick start a new epoch, before
//     they wake anyone. A flush sent during epoch e took its ids after
//     every commit announced by then, so once one is answered, every id
//     from its first one on that it does not hold is a commit nobody has
//     announced yet, whose wake-up will start a new epoch and wake the
//     subscriber again. Until then (trustEpoch != epoch), and for reads
//     from before trustFrom, the table answers.
type recent struct {
	mu     sync.Mutex
	events []recentEvent // ascending ids, at most 2 × recentSize
	bytes  int           // the payloads' bytes in events
	// epoch counts the signs of commits by other replicas.
	epoch uint64
	// trustEpoch is the epoch in which trustFrom was proven (see above);
	// it differs from epoch until a flush of epoch is answered.
	trustEpoch uint64
	trustFrom  int64
}

type recentEvent struct {
	tenant string
	e      store.LifecycleEvent
}

func newRecent() *recent { return &recent{epoch: 1} }

// foreign starts a new epoch: another replica may have committed events
// this Store does not hold. Call it before waking the subscribers.
func (r *recent) foreign() {
	r.mu.Lock()
	r.epoch++
	r.mu.Unlock()
}

// now returns the epoch a flush is sent in.
func (r *recent) now() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

// committed adds e, which a flush sent in epoch sent committed for tenant,
// with its stored id, time and payload.
func (r *recent) committed(sent uint64, tenant string, e store.LifecycleEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.events, e.ID, byID)
	r.events = slices.Insert(r.events, i, recentEvent{tenant, e})
	r.bytes += len(e.Payload)
	drop := 0
	if len(r.events) > 2*recentSize {
		drop = len(r.events) - recentSize
	}
	for _, x := range r.events[:drop] {
		r.bytes -= len(x.e.Payload)
	}
	for ; r.bytes > recentBytes && drop < len(r.events)-1; drop++ {
		r.bytes -= len(r.events[drop].e.Payload)
	}
	r.events = slices.Delete(r.events, 0, drop)
	if sent != r.epoch {
		return // announced commits may be newer than e
	}
	if r.trustEpoch != sent || e.ID < r.trustFrom {
		r.trustEpoch, r.trustFrom = sent, e.ID
	}
}

// read answers f for tenant, if it can (see recent); ok is false when the
// table must.
func (r *recent) read(tenant string, f store.LifecycleFilter) (_ []store.LifecycleEvent, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.trustEpoch != r.epoch || f.After+1 < r.trustFrom || len(r.events) == 0 {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(r.events, f.After+1, byID)
	if i == len(r.events) {
		return []store.LifecycleEvent{}, true // nothing newer is committed, or it is announced
	}
	if r.events[i].e.ID != f.After+1 {
		return nil, false // evicted, or another replica's
	}
	for j := i + 1; j < len(r.events); j++ {
		if r.events[j].e.ID != r.events[j-1].e.ID+1 {
			return nil, false
		}
	}
	out := []store.LifecycleEvent{}
	for _, x := range r.events[i:] {
		if len(out) == limit(f.Limit) {
			break
		}
		if x.tenant != tenant || (f.ParentID != "" && x.e.ParentID != f.ParentID) ||
			(f.RootID != "" && x.e.RootID != f.RootID) || (len(f.Types) > 0 && !slices.Contains(f.Types, x.e.Type)) {
			continue
		}
		e := x.e
		e.Payload = bytes.Clone(e.Payload) // the caller's own, as from the table
		out = append(out, e)
	}
	return out, true
}

func byID(x recentEvent, id int64) int { return cmp.Compare(x.e.ID, id) }
