// Package memstore is the in-memory store.Store: the default when no
// DATABASE_URL is configured, and the fast store for unit tests. It behaves
// like internal/pg (both pass storetest.Run), including what a database does
// to values: times come back in UTC truncated to microseconds, JSON that is
// not valid is rejected, and zero times are set from the store's clock.
// Returned values never share memory with the store.
//
// Memory stays bounded under indefinite load (Retention): disposed one-shot
// runs are evicted, with their child's session and log, once more than
// Retention.Runs (plus an eighth, to evict in batches) are kept or one was
// disposed longer than Retention.Age ago, and the lifecycle log keeps its newest Retention.Events events. An
// evicted run or session is then not found, as if it had never existed; a
// lifecycle read after an evicted id starts at the oldest kept one.
package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// Retention bounds what the store keeps. A zero field takes its default.
type Retention struct {
	// Runs is how many disposed one-shot runs (each with its child's
	// session and log) are kept; once an eighth more are, the oldest
	// disposed beyond Runs are evicted.
	Runs int
	// Age is how long a disposed one-shot run is kept after disposal.
	// Eviction happens on the next write.
	Age time.Duration
	// Events is how many lifecycle events are kept, the newest; by default
	// twice Runs (a run's start and end).
	Events int
}

// Retention defaults.
const (
	DefaultRetainRuns = 10_000
	DefaultRetainAge  = time.Hour
)

func (r Retention) withDefaults() Retention {
	r.Runs = cmp.Or(r.Runs, DefaultRetainRuns)
	r.Age = cmp.Or(r.Age, DefaultRetainAge)
	r.Events = cmp.Or(r.Events, 2*r.Runs)
	return r
}

// Store is an in-memory store.Store, safe for concurrent use.
type Store struct {
	hub    store.Hub
	retain Retention

	mu        sync.RWMutex
	sessions  map[string]*session                // by id, every tenant
	byTenant  map[string][]*session              // by tenant, in (CreatedAt, ID) order
	byParent  map[[2]string][]*session           // by (tenant, parent), in (CreatedAt, ID) order
	runs      map[string]*run                    // by id, every tenant
	runList   map[string][]*run                  // by tenant, in (StartedAt, ID) order
	byChild   map[string][]*run                  // by child id, in start order: SessionUsage
	lifecycle []lifecycleEvent                   // lifecycle[i].ev.ID == lifeBase+i+1
	lifeBase  int64                              // ids evicted from the front
	lifeLast  map[string]int64                   // newest lifecycle id, by tenant
	disposed  []disposal                         // disposed one-shot runs, oldest first
	inbox     map[string]bool                    // ids of queued messages, every tenant
	inboxPos  map[string]uint64                  // acceptance position of each queued message
	inboxSeq  uint64                             // last acceptance position handed out
	queues    map[[2]string][]store.InboxMessage // by (tenant, child), in acceptance order
	idem      map[[2]string]store.Idempotency    // by (tenant, key)

	signins signins
	hooks   hooks
	// residents are the resident leases, by (tenant, session).
	residents map[[2]string]store.Resident
	controls  controls
	approvals approvals
	trees     treeLocks
}

type session struct {
	tenant string
	hdr    store.Session
	events []store.Event // events[i].Seq == i
	// usage is the running sum of the usage of the events appended after
	// creation (store.SessionUsage.Log).
	usage store.Usage
	// snapshot is the seq of the newest store.SnapshotEvent, -1 when the
	// log has none: LogTail starts there.
	snapshot int64
	// disposedAt is when the session was disposed (DisposeSession), zero
	// while it was not.
	disposedAt time.Time
	// limits are the session's current limits (SetSessionLimits), its
	// header's until then.
	limits store.Limits
	// paused is the mark of SetTreePaused.
	paused bool
}

type run struct {
	tenant string
	r      store.Run
}

// disposal records when a one-shot run was disposed, for eviction.
type disposal struct {
	runID string
	at    time.Time
}

type lifecycleEvent struct {
	tenant string
	ev     store.LifecycleEvent
}

var _ store.Store = (*Store)(nil)

// New returns an empty store with the default Retention.
func New() *Store { return NewWithRetention(Retention{}) }

// NewWithRetention returns an empty store that keeps what r allows.
func NewWithRetention(r Retention) *Store {
	return &Store{
		retain:   r.withDefaults(),
		sessions: make(map[string]*session),
		byTenant: make(map[string][]*session),
		byParent: make(map[[2]string][]*session),
		runs:     make(map[string]*run),
		runList:  make(map[string][]*run),
		byChild:  make(map[string][]*run),
		inbox:    make(map[string]bool),
		inboxPos: make(map[string]uint64),
		queues:   make(map[[2]string][]store.InboxMessage),
		lifeLast: make(map[string]int64),
	}
}

// CreateSession stores a new header. Returns store.ErrConflict if the id
// exists, in any tenant.
func (s *Store) CreateSession(ctx context.Context, hdr store.Session) error {
	_, err := s.CreateSessionWithEvents(ctx, hdr)
	return err
}

// CreateSessionWithEvents stores a new header with evs as the start of its
// log, atomically. Returns store.ErrConflict if the id exists, in any
// tenant, and an error (storing nothing) if an event is invalid.
func (s *Store) CreateSessionWithEvents(ctx context.Context, hdr store.Session, evs ...store.NewEvent) ([]store.Event, error) {
	if err := store.CheckEvents(evs); err != nil {
		return nil, fmt.Errorf("memstore: create session %q: %w", hdr.ID, err)
	}
	s.mu.Lock()
	out, err := s.createLocked(store.Tenant(ctx), hdr, evs)
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	if len(evs) > 0 {
		s.hub.Wake(store.SessionTopic(hdr.ID))
	}
	return out, nil
}

// createLocked stores hdr with the checked evs as the start of its log and
// returns them as stored. Returns store.ErrConflict if the id exists. The
// caller holds s.mu.
func (s *Store) createLocked(tenant string, hdr store.Session, evs []store.NewEvent) ([]store.Event, error) {
	if _, ok := s.sessions[hdr.ID]; ok {
		return nil, fmt.Errorf("create session %q: %w", hdr.ID, store.ErrConflict)
	}
	hdr = cloneSession(hdr)
	hdr.CreatedAt = stamp(hdr.CreatedAt)
	hdr.Limits = hdr.Limits.Stored()
	if hdr.RootID == "" {
		hdr.RootID = s.rootOfLocked(hdr)
	}
	sess := &session{tenant: tenant, hdr: hdr, snapshot: -1, limits: hdr.Limits.Stored()}
	s.sessions[hdr.ID] = sess
	s.byTenant[tenant] = insertSorted(s.byTenant[tenant], sess, cmpSession)
	key := [2]string{tenant, hdr.ParentID}
	s.byParent[key] = insertSorted(s.byParent[key], sess, cmpSession)
	return sess.append(evs), nil
}

// rootOfLocked is the root of a new session hdr: itself for a root, else
// its parent's root, or its parent when that is not stored. The caller
// holds s.mu.
func (s *Store) rootOfLocked(hdr store.Session) string {
	if hdr.ParentID == "" {
		return hdr.ID
	}
	if p, ok := s.sessions[hdr.ParentID]; ok && p.hdr.RootID != "" {
		return p.hdr.RootID
	}
	return hdr.ParentID
}

// addUsage adds the usage evs record to the session's running sum.
func (sess *session) addUsage(evs []store.NewEvent) {
	for _, e := range evs {
		sess.usage = sess.usage.Add(e.Usage)
	}
}

// GetSession returns one header. Returns store.ErrNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return store.Session{}, fmt.Errorf("memstore: get session: %w", err)
	}
	return cloneSession(sess.hdr), nil
}

// DisposeSession marks session id disposed at at, keeping the first
// mark, and returns the mark. Returns store.ErrNotFound.
func (s *Store) DisposeSession(ctx context.Context, id string, at time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return time.Time{}, fmt.Errorf("memstore: dispose session: %w", err)
	}
	if sess.disposedAt.IsZero() {
		sess.disposedAt = at.UTC().Truncate(time.Microsecond)
	}
	return sess.disposedAt, nil
}

// Disposed returns when session id was disposed, zero when it was not.
// Returns store.ErrNotFound.
func (s *Store) Disposed(ctx context.Context, id string) (time.Time, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return time.Time{}, fmt.Errorf("memstore: disposed: %w", err)
	}
	return sess.disposedAt, nil
}

// SessionLimits returns the limits stored with session id. Returns
// store.ErrNotFound.
func (s *Store) SessionLimits(ctx context.Context, id string) (store.Limits, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return store.Limits{}, fmt.Errorf("memstore: session limits: %w", err)
	}
	return sess.limits.Clone(), nil
}

// SetSessionLimits replaces the limits stored with session id; its header
// keeps those it was created with. Returns store.ErrNotFound.
func (s *Store) SetSessionLimits(ctx context.Context, id string, l store.Limits) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return fmt.Errorf("memstore: set session limits: %w", err)
	}
	sess.limits = l.Stored()
	return nil
}

// PatchSessionLimits applies p to the limits stored with session id and
// returns the result. Returns store.ErrNotFound.
func (s *Store) PatchSessionLimits(ctx context.Context, id string, p store.LimitsPatch) (store.Limits, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return store.Limits{}, fmt.Errorf("memstore: patch session limits: %w", err)
	}
	sess.limits = sess.limits.Patched(p).Stored()
	return sess.limits.Clone(), nil
}

// SetTreePaused marks session id's tree paused or not and reports whether
// the mark changed. Returns store.ErrNotFound.
func (s *Store) SetTreePaused(ctx context.Context, id string, paused bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, err := s.session(ctx, id)
	if err != nil {
		return false, fmt.Errorf("memstore: set tree paused: %w", err)
	}
	changed := sess.paused != paused
	sess.paused = paused
	return changed, nil
}

// treeLocks are the admission locks of LockTree: the trees held, each
// with a channel closed when its holder lets go.
type treeLocks struct {
	mu   sync.Mutex
	held map[[2]string]chan struct{} // by (tenant, root)
}

// LockTree takes the admission lock of root's tree, waiting while another
// caller holds it.
func (s *Store) LockTree(ctx context.Context, root string) (func(), error) {
	key := [2]string{store.Tenant(ctx), root}
	l := &s.trees
	for {
		l.mu.Lock()
		gone, busy := l.held[key]
		if !busy {
			if l.held == nil {
				l.held = make(map[[2]string]chan struct{})
			}
			mine := make(chan struct{})
			l.held[key] = mine
			l.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					delete(l.held, key)
					l.mu.Unlock()
					close(mine)
				})
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-gone:
		case <-ctx.Done():
			return nil, fmt.Errorf("memstore: lock tree %q: %w", root, ctx.Err())
		}
	}
}

// ListSessions returns headers ordered by (CreatedAt, ID). Returns
// store.ErrNotFound if f.AfterID names no session of the tenant.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list, err := s.listed(ctx, f.ParentID, f.AfterID)
	if err != nil {
		return nil, err
	}
	list = list[:min(len(list), limit(f.Limit))]
	out := make([]store.Session, len(list))
	for i, sess := range list {
		out[i] = cloneSession(sess.hdr)
	}
	return out, nil
}

// listed returns the tenant's sessions (the children of parentID when it
// is non-nil) after the session afterID, ordered by (CreatedAt, ID). The
// caller holds s.mu.
func (s *Store) listed(ctx context.Context, parentID *string, afterID string) ([]*session, error) {
	tenant := store.Tenant(ctx)
	list := s.byTenant[tenant]
	if parentID != nil {
		list = s.byParent[[2]string{tenant, *parentID}]
	}
	if afterID != "" {
		after, err := s.session(ctx, afterID)
		if err != nil {
			return nil, fmt.Errorf("memstore: list sessions after cursor: %w", err)
		}
		i, found := slices.BinarySearchFunc(list, after, cmpSession)
		if found {
			i++
		}
		list = list[i:]
	}
	return list, nil
}

// SearchSessions scans the logs of the listed sessions, in order, for the
// first event whose text matches f.Query.
func (s *Store) SearchSessions(ctx context.Context, f store.SearchFilter) ([]store.SessionHit, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list, err := s.listed(ctx, f.ParentID, f.AfterID)
	if err != nil || f.Query == "" {
		return nil, err
	}
	var out []store.SessionHit
	for _, sess := range list {
		for _, e := range sess.events {
			if e.Type != store.SearchSkips && store.Matches(store.SearchText(e.Data), f.Query) {
				e.Data = cloneJSON(e.Data)
				out = append(out, store.SessionHit{Session: cloneSession(sess.hdr), Event: e})
				break
			}
		}
		if len(out) == limit(f.Limit) {
			break
		}
	}
	return out, nil
}

// session returns the tenant's session id. The caller holds s.mu.
func (s *Store) session(ctx context.Context, id string) (*session, error) {
	sess, ok := s.sessions[id]
	if !ok || sess.tenant != store.Tenant(ctx) {
		return nil, fmt.Errorf("session %q: %w", id, store.ErrNotFound)
	}
	return sess, nil
}

// AppendEvents appends evs atomically with the next contiguous seqs. Returns
// store.ErrNotFound for an unknown session, and an error (appending nothing)
// if any Data is not valid JSON. A nil Data is stored as JSON null.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) ([]store.Event, error) {
	if err := store.CheckEvents(evs); err != nil {
		return nil, fmt.Errorf("memstore: append to session %q: %w", sessionID, err)
	}
	s.mu.Lock()
	sess, err := s.session(ctx, sessionID)
	if err == nil {
		err = s.fenced(ctx, sess.tenant, sessionID)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("memstore: append events: %w", err)
	}
	out := sess.append(evs)
	sess.addUsage(evs)
	s.mu.Unlock()
	if len(evs) > 0 {
		s.hub.Wake(store.SessionTopic(sessionID))
	}
	return out, nil
}

// append adds evs to the log with the next seqs and returns copies of them
// as stored. The caller holds s.mu and has checked evs. The stored data of
// one call share one new array, and the returned data another (datas), so
// that a run's appends cost two allocations each rather than two per event.
func (sess *session) append(evs []store.NewEvent) []store.Event {
	out := make([]store.Event, len(evs))
	stored := datas(len(evs), func(i int) json.RawMessage { return storedData(evs[i].Data) })
	now := time.Now()
	for i, e := range evs {
		t := e.Time
		if t.IsZero() {
			t = now
		}
		out[i] = store.Event{Seq: int64(len(sess.events)), Type: e.Type, Time: norm(t), Data: stored[i]}
		sess.events = append(sess.events, out[i])
		if e.Type == store.SnapshotEvent {
			sess.snapshot = out[i].Seq
		}
	}
	copies := datas(len(out), func(i int) json.RawMessage { return out[i].Data })
	for i := range out {
		out[i].Data = copies[i]
	}
	return out
}

// storedData is a NewEvent's data as stored: JSON null for none.
func storedData(data json.RawMessage) json.RawMessage {
	if len(data) == 0 {
		return json.RawMessage("null")
	}
	return data
}

// datas copies the n byte slices of data(i) into one new array, each
// capped at its own length so that appending to one never writes into the
// next.
func datas(n int, data func(i int) json.RawMessage) []json.RawMessage {
	total := 0
	for i := range n {
		total += len(data(i))
	}
	buf := make([]byte, 0, total)
	out := make([]json.RawMessage, n)
	for i := range n {
		start := len(buf)
		buf = append(buf, data(i)...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// Events returns up to n events with Seq > after, in seq order. Returns
// store.ErrNotFound for an unknown session.
func (s *Store) Events(ctx context.Context, sessionID string, after int64, n int) ([]store.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("memstore: read events: %w", err)
	}
	return sess.page(after, n), nil
}

// EventsBefore returns the last n events with Seq < before, in seq order.
// Returns store.ErrNotFound for an unknown session.
func (s *Store) EventsBefore(ctx context.Context, sessionID string, before int64, n int) ([]store.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("memstore: read events: %w", err)
	}
	to := min(max(before, 0), int64(len(sess.events)))
	return copyEvents(sess.events[max(to-int64(limit(n)), 0):to]), nil
}

// page returns copies of up to n events with Seq > after. The caller holds
// s.mu.
func (sess *session) page(after int64, n int) []store.Event {
	from := min(max(after+1, 0), int64(len(sess.events)))
	list := sess.events[from:]
	return copyEvents(list[:min(len(list), limit(n))])
}

// copyEvents returns a copy of list whose Data shares nothing with it.
func copyEvents(list []store.Event) []store.Event {
	out := slices.Clone(list)
	copies := datas(len(out), func(i int) json.RawMessage { return out[i].Data })
	for i := range out {
		out[i].Data = copies[i]
	}
	return out
}

// LogTail returns up to n events from the newest store.SnapshotEvent on
// (from the start without one). Returns store.ErrNotFound for an unknown
// session.
func (s *Store) LogTail(ctx context.Context, sessionID string, n int) ([]store.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sess, err := s.session(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("memstore: read log tail: %w", err)
	}
	return sess.page(max(sess.snapshot, 0)-1, n), nil
}

// StartRun stores r as running and appends start, atomically. Returns
// store.ErrConflict if the run id exists, in any tenant. Settlement fields of r
// are ignored; a zero StartedAt is set to now.
func (s *Store) StartRun(ctx context.Context, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
	if err := checkJSON(start.Payload); err != nil {
		return store.LifecycleEvent{}, fmt.Errorf("memstore: start run %q: payload: %w", r.ID, err)
	}
	s.mu.Lock()
	start, err := s.startLocked(store.Tenant(ctx), r, start)
	s.mu.Unlock()
	if err != nil {
		return store.LifecycleEvent{}, fmt.Errorf("memstore: %w", err)
	}
	s.hub.Wake(store.LifecycleTopic)
	return start, nil
}

// StartRunWithSession stores the child session hdr with evs as the start
// of its log, r as running and start, atomically. Returns
// store.ErrConflict if the session or run id exists, in any tenant, and an
// error (storing nothing) if an event or start's payload is invalid.
func (s *Store) StartRunWithSession(ctx context.Context, p store.StartRunParams) ([]store.Event, store.LifecycleEvent, error) {
	hdr, evs, r, start := p.Session, p.Events, p.Run, p.Start
	if err := store.CheckEvents(evs); err != nil {
		return nil, store.LifecycleEvent{}, fmt.Errorf("memstore: start run %q with session %q: %w", r.ID, hdr.ID, err)
	}
	if err := checkJSON(start.Payload); err != nil {
		return nil, store.LifecycleEvent{}, fmt.Errorf("memstore: start run %q: payload: %w", r.ID, err)
	}
	tenant := store.Tenant(ctx)
	s.mu.Lock()
	var log []store.Event
	err := s.startFree(r.ID)
	if err == nil {
		log, err = s.createLocked(tenant, hdr, evs)
	}
	if err == nil {
		start, err = s.startLocked(tenant, r, start)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, store.LifecycleEvent{}, fmt.Errorf("memstore: %w", err)
	}
	if len(evs) > 0 {
		s.hub.Wake(store.SessionTopic(hdr.ID))
	}
	s.hub.Wake(store.LifecycleTopic)
	return log, start, nil
}

// startFree returns store.ErrConflict if run id exists. The caller holds
// s.mu.
func (s *Store) startFree(id string) error {
	if _, ok := s.runs[id]; ok {
		return fmt.Errorf("start run %q: %w", id, store.ErrConflict)
	}
	return nil
}

// startLocked stores r as running and appends start (its payload checked).
// Returns store.ErrConflict if the run id exists. The caller holds s.mu.
func (s *Store) startLocked(tenant string, r store.Run, start store.LifecycleEvent) (store.LifecycleEvent, error) {
	s.evict(time.Now())
	if err := s.startFree(r.ID); err != nil {
		return store.LifecycleEvent{}, err
	}
	rec := &run{tenant: tenant, r: store.Run{
		ID: r.ID, Kind: r.Kind, Provider: r.Provider, ChildID: r.ChildID, ParentID: r.ParentID,
		RootID: r.RootID, TaskID: r.TaskID, Local: r.Local, State: store.StateRunning, StartedAt: stamp(r.StartedAt),
		Owner: r.Owner, LeaseUntil: norm(r.LeaseUntil), Tenant: tenant, Traceparent: r.Traceparent,
	}}
	s.runs[r.ID] = rec
	s.runList[tenant] = insertSorted(s.runList[tenant], rec, cmpRun)
	s.byChild[r.ChildID] = append(s.byChild[r.ChildID], rec)
	return s.appendLifecycle(tenant, start), nil
}

// EndRun settles the run with res and appends end, atomically. Returns
// store.ErrNotFound, or store.ErrConflict if the run already ended.
func (s *Store) EndRun(ctx context.Context, runID string, res store.RunResult, end store.LifecycleEvent) (store.LifecycleEvent, error) {
	end, _, err := s.EndRunWithEvents(ctx, store.EndRunParams{RunID: runID, Result: res, End: end})
	return end, err
}

// EndRunWithEvents appends evs to the log of the run's child session,
// settles the run with res and appends end, atomically. Returns
// store.ErrNotFound for an unknown run (or, with events, a child without
// a session), store.ErrConflict if the run already ended, and an error
// (storing nothing) for an invalid event or payload.
func (s *Store) EndRunWithEvents(ctx context.Context, p store.EndRunParams) (store.LifecycleEvent, []store.Event, error) {
	runID, res, end, evs := p.RunID, p.Result, p.End, p.Events
	for _, b := range []json.RawMessage{res.Output, res.Structured, end.Payload} {
		if err := checkJSON(b); err != nil {
			return store.LifecycleEvent{}, nil, fmt.Errorf("memstore: end run %q: %w", runID, err)
		}
	}
	if err := store.CheckEvents(evs); err != nil {
		return store.LifecycleEvent{}, nil, fmt.Errorf("memstore: end run %q: %w", runID, err)
	}
	s.mu.Lock()
	rec, err := s.run(ctx, runID)
	if err == nil && rec.r.State != store.StateRunning {
		err = fmt.Errorf("run %q already ended: %w", runID, store.ErrConflict)
	}
	if err == nil && rec.r.Kind == store.KindActivation {
		err = s.fenced(ctx, rec.tenant, rec.r.ChildID)
	}
	var child *session
	if err == nil && len(evs) > 0 {
		child, err = s.session(ctx, rec.r.ChildID)
	}
	if err != nil {
		s.mu.Unlock()
		return store.LifecycleEvent{}, nil, fmt.Errorf("memstore: end run: %w", err)
	}
	var log []store.Event
	if child != nil {
		log = child.append(evs)
		child.addUsage(evs)
	}
	rec.r.State = store.StateSettled
	rec.r.EndedAt = stamp(res.EndedAt)
	rec.r.StopReason = res.StopReason
	rec.r.Output = cloneJSON(res.Output)
	rec.r.Structured = cloneJSON(res.Structured)
	rec.r.Diagnostic = res.Diagnostic
	rec.r.Usage, rec.r.UsageKnown = res.Usage, res.UsageKnown
	end = s.appendLifecycle(rec.tenant, end)
	s.mu.Unlock()
	if child != nil {
		s.hub.Wake(store.SessionTopic(child.hdr.ID))
	}
	s.hub.Wake(store.LifecycleTopic)
	return end, log, nil
}

// DisposeRun marks a settled run disposed; disposing again is a no-op.
// Returns store.ErrNotFound, or store.ErrConflict while the run is running.
func (s *Store) DisposeRun(ctx context.Context, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.run(ctx, runID)
	if err == nil && rec.r.State == store.StateRunning {
		err = fmt.Errorf("run %q is running: %w", runID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("memstore: dispose run: %w", err)
	}
	if rec.r.State != store.StateDisposed && rec.r.Kind == store.KindOneShot {
		s.disposed = append(s.disposed, disposal{runID: runID, at: time.Now()})
	}
	rec.r.State = store.StateDisposed
	s.evict(time.Now())
	return nil
}

// evict drops the oldest disposed one-shot runs beyond the retention, each
// with its child's session and log. The count bound is checked with a slack
// of an eighth, so that eviction works in batches: one pass over the sorted
// lists per batch rather than one per run. The caller holds s.mu.
func (s *Store) evict(now time.Time) {
	n := 0
	if len(s.disposed) > s.retain.Runs+s.retain.Runs/8 {
		n = len(s.disposed) - s.retain.Runs
	}
	for n < len(s.disposed) && now.Sub(s.disposed[n].at) > s.retain.Age {
		n++
	}
	if n == 0 {
		return
	}
	gone := make(map[string]bool, 2*n) // run and session ids
	for _, d := range s.disposed[:n] {
		rec, ok := s.runs[d.runID]
		if !ok {
			continue
		}
		delete(s.runs, d.runID)
		gone[d.runID] = true
		if list := slices.DeleteFunc(s.byChild[rec.r.ChildID], func(r *run) bool { return r == rec }); len(list) > 0 {
			s.byChild[rec.r.ChildID] = list
		} else {
			delete(s.byChild, rec.r.ChildID)
		}
		if sess, ok := s.sessions[rec.r.ChildID]; ok && sess.tenant == rec.tenant && sess.hdr.Mode != "continuable" {
			delete(s.sessions, sess.hdr.ID)
			gone[sess.hdr.ID] = true
		}
	}
	s.disposed = s.disposed[n:] // the next growth copies only what is kept
	for tenant, list := range s.runList {
		s.runList[tenant] = slices.DeleteFunc(list, func(r *run) bool { return gone[r.r.ID] })
	}
	for tenant, list := range s.byTenant {
		s.byTenant[tenant] = slices.DeleteFunc(list, func(x *session) bool { return gone[x.hdr.ID] })
	}
	for key, list := range s.byParent {
		if list = slices.DeleteFunc(list, func(x *session) bool { return gone[x.hdr.ID] }); len(list) > 0 {
			s.byParent[key] = list
		} else {
			delete(s.byParent, key)
		}
	}
}

// GetRun returns one run. Returns store.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, runID string) (store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rec, err := s.run(ctx, runID)
	if err != nil {
		return store.Run{}, fmt.Errorf("memstore: get run: %w", err)
	}
	r := cloneRun(rec.r)
	r.PendingApprovals = s.approvals.pending[runID]
	return r, nil
}

// run returns the tenant's run id. The caller holds s.mu.
func (s *Store) run(ctx context.Context, id string) (*run, error) {
	rec, ok := s.runs[id]
	if !ok || rec.tenant != store.Tenant(ctx) {
		return nil, fmt.Errorf("run %q: %w", id, store.ErrNotFound)
	}
	return rec, nil
}

// ListRuns returns the tenant's runs matching f, ordered by (StartedAt, ID).
// Returns store.ErrNotFound if f.AfterID names no run of the tenant.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := s.runList[store.Tenant(ctx)]
	if f.AfterID != "" {
		after, err := s.run(ctx, f.AfterID)
		if err != nil {
			return nil, fmt.Errorf("memstore: list runs after cursor: %w", err)
		}
		i, found := slices.BinarySearchFunc(list, after, cmpRun)
		if found {
			i++
		}
		list = list[i:]
	}
	n := limit(f.Limit)
	var out []store.Run
	for _, rec := range list {
		if len(out) == n {
			break
		}
		r := rec.r
		if (f.ParentID == "" || r.ParentID == f.ParentID) && (f.ChildID == "" || r.ChildID == f.ChildID) &&
			(len(f.ChildIDs) == 0 || slices.Contains(f.ChildIDs, r.ChildID)) &&
			(f.TaskID == "" || r.TaskID == f.TaskID) && (f.State == "" || r.State == f.State) {
			r = cloneRun(r)
			r.PendingApprovals = s.approvals.pending[r.ID]
			out = append(out, r)
		}
	}
	return out, nil
}

// SessionUsage returns the usage of session id and, with tree, of every
// session below it: the session first, then the others in (CreatedAt, ID)
// order. Returns store.ErrNotFound for an unknown session.
func (s *Store) SessionUsage(ctx context.Context, id string, tree bool, now time.Time) ([]store.SessionUsage, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	root, err := s.session(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("memstore: session usage: %w", err)
	}
	out := []store.SessionUsage{s.usageLocked(root, now)}
	if !tree {
		return out, nil
	}
	var below []*session
	seen := map[string]bool{id: true}
	for queue := []string{id}; len(queue) > 0; queue = queue[1:] {
		for _, kid := range s.byParent[[2]string{root.tenant, queue[0]}] {
			if !seen[kid.hdr.ID] {
				seen[kid.hdr.ID] = true
				below = append(below, kid)
				queue = append(queue, kid.hdr.ID)
			}
		}
	}
	slices.SortFunc(below, cmpSession)
	for _, sess := range below {
		out = append(out, s.usageLocked(sess, now))
	}
	return out, nil
}

// usageLocked is the usage of sess: its log's sum and its runs'. The caller
// holds s.mu.
func (s *Store) usageLocked(sess *session, now time.Time) store.SessionUsage {
	u := store.SessionUsage{SessionID: sess.hdr.ID, ParentID: sess.hdr.ParentID, Log: sess.usage}
	for _, rec := range s.byChild[sess.hdr.ID] {
		if rec.tenant != sess.tenant {
			continue
		}
		u.RunCount++
		switch {
		case rec.r.State == store.StateRunning:
			if rec.r.LeaseUntil.After(now) {
				u.LiveRuns++
			}
		default:
			u.Runs = u.Runs.Add(rec.r.Usage)
			if !rec.r.UsageKnown {
				u.Unknown++
			}
		}
	}
	return u
}

// RenewLeases sets LeaseUntil of every running run and resident lease owned
// by owner, in every tenant: a replica's heartbeat covers all it drives.
func (s *Store) RenewLeases(ctx context.Context, owner string, until time.Time) error {
	until = norm(until)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.runs {
		if rec.r.State == store.StateRunning && rec.r.Owner == owner {
			rec.r.LeaseUntil = until
		}
	}
	s.renewResidents(owner, until)
	return nil
}

// ExpiredRuns returns running runs of every tenant whose lease ended before
// now, ordered by (StartedAt, ID), at most 1000. A run without a lease (zero
// LeaseUntil) never expires.
func (s *Store) ExpiredRuns(ctx context.Context, now time.Time) ([]store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []store.Run
	for _, rec := range s.runs {
		r := rec.r
		if r.State == store.StateRunning && !r.LeaseUntil.IsZero() && r.LeaseUntil.Before(now) {
			out = append(out, cloneRun(r))
		}
	}
	slices.SortFunc(out, func(a, b store.Run) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), maxLimit)], nil
}

// AppendLifecycle appends e with the next id. A zero Time is set to now.
func (s *Store) AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (store.LifecycleEvent, error) {
	if err := checkJSON(e.Payload); err != nil {
		return store.LifecycleEvent{}, fmt.Errorf("memstore: append lifecycle %q: payload: %w", e.Type, err)
	}
	s.mu.Lock()
	e = s.appendLifecycle(store.Tenant(ctx), e)
	s.mu.Unlock()
	s.hub.Wake(store.LifecycleTopic)
	return e, nil
}

// appendLifecycle stores e with the next id, drops the oldest event beyond
// the retention, and returns a copy. The caller holds s.mu and wakes the
// lifecycle topic after unlocking.
func (s *Store) appendLifecycle(tenant string, e store.LifecycleEvent) store.LifecycleEvent {
	e.ID = s.lifeBase + int64(len(s.lifecycle)) + 1
	e.Time = stamp(e.Time)
	e.Payload = cloneJSON(e.Payload)
	s.lifecycle = append(s.lifecycle, lifecycleEvent{tenant: tenant, ev: e})
	s.lifeLast[tenant] = e.ID
	if over := len(s.lifecycle) - s.retain.Events; over > 0 {
		clear(s.lifecycle[:over]) // release the payloads; the slice's next growth drops the rest
		s.lifecycle = s.lifecycle[over:]
		s.lifeBase += int64(over)
	}
	return cloneLifecycle(e)
}

// LastLifecycleID returns the ID of the tenant's newest lifecycle event, 0
// when it has none.
func (s *Store) LastLifecycleID(ctx context.Context) (int64, error) {
	tenant := store.Tenant(ctx)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := len(s.lifecycle) - 1; i >= 0; i-- {
		if s.lifecycle[i].tenant == tenant {
			return s.lifecycle[i].ev.ID, nil
		}
	}
	return 0, nil
}

// Lifecycle returns the tenant's events with ID > f.After matching f, in id
// order.
func (s *Store) Lifecycle(ctx context.Context, f store.LifecycleFilter) ([]store.LifecycleEvent, error) {
	tenant := store.Tenant(ctx)
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := limit(f.Limit)
	var out []store.LifecycleEvent
	for _, rec := range s.lifecycle[min(max(f.After-s.lifeBase, 0), int64(len(s.lifecycle))):] {
		if len(out) == n {
			break
		}
		e := rec.ev
		if rec.tenant == tenant && (f.ParentID == "" || e.ParentID == f.ParentID) &&
			(f.RootID == "" || e.RootID == f.RootID) &&
			(len(f.Types) == 0 || slices.Contains(f.Types, e.Type)) {
			out = append(out, cloneLifecycle(e))
		}
	}
	return out, nil
}

// Enqueue stores an accepted followup. Returns store.ErrConflict if the id
// exists, in any tenant. A zero CreatedAt is set to now.
func (s *Store) Enqueue(ctx context.Context, m store.InboxMessage) error {
	for _, b := range []json.RawMessage{m.Content, m.Source} {
		if err := checkJSON(b); err != nil {
			return fmt.Errorf("memstore: enqueue %q: %w", m.ID, err)
		}
	}
	m = cloneInbox(m)
	m.CreatedAt = stamp(m.CreatedAt)
	key := [2]string{store.Tenant(ctx), m.ChildID}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inbox[m.ID] {
		return fmt.Errorf("memstore: enqueue %q: %w", m.ID, store.ErrConflict)
	}
	s.inbox[m.ID] = true
	s.inboxSeq++
	s.inboxPos[m.ID] = s.inboxSeq
	s.queues[key] = append(s.queues[key], m)
	return nil
}

// Pending returns the child's undelivered messages in acceptance order, at
// most 1000.
func (s *Store) Pending(ctx context.Context, childID string) ([]store.InboxMessage, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	q := s.queues[[2]string{store.Tenant(ctx), childID}]
	q = q[:min(len(q), maxLimit)]
	out := make([]store.InboxMessage, len(q))
	for i, m := range q {
		out[i] = cloneInbox(m)
	}
	return out, nil
}

// PendingChildren lists the children of every tenant with undelivered
// messages, ordered by their oldest message's acceptance, at most 1000.
func (s *Store) PendingChildren(ctx context.Context) ([]store.PendingChild, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	type entry struct {
		pc    store.PendingChild
		first uint64
	}
	var list []entry
	for key, q := range s.queues {
		if len(q) > 0 {
			list = append(list, entry{store.PendingChild{Tenant: key[0], ChildID: key[1]}, s.inboxPos[q[0].ID]})
		}
	}
	slices.SortFunc(list, func(a, b entry) int { return cmp.Compare(a.first, b.first) })
	out := make([]store.PendingChild, 0, min(len(list), maxLimit))
	for _, e := range list[:min(len(list), maxLimit)] {
		out = append(out, e.pc)
	}
	return out, nil
}

// Ack removes the child's delivered messages ids; unknown ids are ignored.
func (s *Store) Ack(ctx context.Context, childID string, ids ...string) error {
	key := [2]string{store.Tenant(ctx), childID}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := slices.DeleteFunc(slices.Clone(s.queues[key]), func(m store.InboxMessage) bool {
		if slices.Contains(ids, m.ID) {
			delete(s.inbox, m.ID)
			delete(s.inboxPos, m.ID)
			return true
		}
		return false
	})
	if len(q) == 0 {
		delete(s.queues, key)
	} else {
		s.queues[key] = q
	}
	return nil
}

// Subscribe returns a channel woken after each commit that touches topic.
func (s *Store) Subscribe(topic string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(topic)
}

// Ping always succeeds: memory is always reachable.
func (s *Store) Ping(ctx context.Context) error { return nil }

const (
	defaultLimit = 100
	maxLimit     = 1000
)

// limit applies the store.Store limit rules: <= 0 means 100, at most 1000.
func limit(n int) int {
	if n <= 0 {
		return defaultLimit
	}
	return min(n, maxLimit)
}

// stamp normalises t like a timestamptz column, setting a zero t to now.
func stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return norm(t)
}

// norm normalises t like a timestamptz column: UTC, whole microseconds. The
// zero time stays zero (a NULL column).
func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// insertSorted inserts v into the sorted list. New sessions and runs
// mostly sort last, so that case appends without a search.
func insertSorted[T any](list []T, v T, cmp func(a, b T) int) []T {
	if len(list) == 0 || cmp(list[len(list)-1], v) < 0 {
		return append(list, v)
	}
	i, _ := slices.BinarySearchFunc(list, v, cmp)
	return slices.Insert(list, i, v)
}

func cmpSession(a, b *session) int {
	return cmp.Or(a.hdr.CreatedAt.Compare(b.hdr.CreatedAt), cmp.Compare(a.hdr.ID, b.hdr.ID))
}

func cmpRun(a, b *run) int {
	return cmp.Or(a.r.StartedAt.Compare(b.r.StartedAt), cmp.Compare(a.r.ID, b.r.ID))
}

// checkJSON rejects what a jsonb column would reject. Empty means NULL.
func checkJSON(b json.RawMessage) error {
	if len(b) > 0 && !json.Valid(b) {
		return errors.New("invalid JSON")
	}
	return nil
}

// cloneJSON copies b, mapping empty to nil (NULL).
func cloneJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}

func cloneSession(s store.Session) store.Session {
	if s.Persona != nil {
		p := *s.Persona
		s.Persona = &p
	}
	s.Limits = s.Limits.Clone()
	return s
}

func cloneRun(r store.Run) store.Run {
	r.Output = cloneJSON(r.Output)
	r.Structured = cloneJSON(r.Structured)
	return r
}

func cloneLifecycle(e store.LifecycleEvent) store.LifecycleEvent {
	e.Payload = cloneJSON(e.Payload)
	return e
}

func cloneInbox(m store.InboxMessage) store.InboxMessage {
	m.Content = cloneJSON(m.Content)
	m.Source = cloneJSON(m.Source)
	return m
}
