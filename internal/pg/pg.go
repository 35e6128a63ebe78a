// Package pg is the Postgres store.Store (docs/architecture.md §7, §5): durable, shared by
// every replica. Writes are group-committed (writer.go): concurrent writes of
// many sessions share one transaction, and each caller is answered after the
// commit that holds its write. Commits are announced with pg_notify after
// the commit, coalesced, while another replica listens (peers.go); each
// Store LISTENs and wakes its own subscribers, so a replica sees what
// another one wrote. NOTIFY is only a wake-up: the tables
// are the truth, every subscriber is woken after a lost listener connection
// and every pollInterval, to re-query.
//
// Values behave like columns: times come back in UTC with microsecond
// precision, JSON is stored as jsonb (so key order and spacing are
// normalised), and zero times are set from the process clock.
package pg

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"github.com/subagentd/subagentd/internal/store"
)

const (
	// notifyChannel carries every wake-up. The payload is the topic, or,
	// from a writer's notifier, "@<writer> <topic>": the writer already woke
	// its own process's subscribers, so its Store's listener skips it.
	notifyChannel = "subagentd"
	// listenerName is the application_name of the LISTEN connection, so
	// operators (and tests) can find it in pg_stat_activity.
	listenerName = "subagentd-listener"
	// reconnectDelay is how long the listener waits before reconnecting
	// (pgxlisten's default is a minute).
	reconnectDelay = time.Second

	defaultLimit = 100
	maxLimit     = 1000
)

// Store is the Postgres store.Store. Create it with New and Close it when
// done; the pool stays the caller's.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	latest uint // newest embedded migration; Ping wants the schema there

	hub     store.Hub
	recent  *recent
	self    string // names this Store's writer in its wake-ups (notifyChannel)
	peers   *peers
	w       *writer
	headers headers
	limits  limitsCache
	stop    context.CancelFunc
	done    chan struct{} // closed when the listener has stopped
}

var _ store.Store = (*Store)(nil)

// New returns a Store on pool, once the schema is at the latest migration
// (run Migrate first) and the listener is LISTENing. ctx bounds only the
// start-up; if it ends first, New fails.
func New(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*Store, error) {
	latest, err := latestVersion()
	if err != nil {
		return nil, fmt.Errorf("pg: new store: %w", err)
	}
	s := &Store{pool: pool, log: log, latest: latest, recent: newRecent(), peers: newPeers(log), done: make(chan struct{})}
	s.limits.wake, _ = s.hub.Subscribe(limitsTopic) // for the Store's life
	if err := s.Ping(ctx); err != nil {
		return nil, fmt.Errorf("pg: new store: %w", err)
	}

	ready := make(chan struct{})
	l := &pgxlisten.Listener{
		Connect:        s.connectListener,
		LogError:       s.logListenerError,
		ReconnectDelay: reconnectDelay,
	}
	s.self = rand.Text()
	l.Handle(notifyChannel, &wakeHandler{hub: &s.hub, recent: s.recent, peers: s.peers, log: log, ready: ready, self: s.self})
	var listenCtx context.Context
	listenCtx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(s.done)
		_ = l.Listen(listenCtx) // returns only once listenCtx is cancelled
	}()
	select {
	case <-ready:
		s.w = newWriter(pool, log, &s.hub, s.recent, s.self, s.peers)
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("pg: new store: listener not connected: %w", context.Cause(ctx))
	}
}

// Close commits the writes already queued, stops the writer and the
// listener and waits for them. Subscribers are not woken again; writes after
// Close still commit, each on its own. Close is idempotent and does not
// close the pool.
func (s *Store) Close() {
	if s.w != nil {
		s.w.close()
	}
	s.stop()
	<-s.done
}

// Ping fails when the database is unreachable or its schema is not at the
// latest embedded migration (dirty, older, or newer than this binary).
func (s *Store) Ping(ctx context.Context) error {
	var version int64
	var dirty bool
	err := s.pool.QueryRow(ctx, `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pg: ping: database is not migrated (no schema version)")
	case err != nil:
		return fmt.Errorf("pg: ping: read schema version: %w", err)
	case dirty:
		return fmt.Errorf("pg: ping: %w", dirtyError(int(version)))
	case version != int64(s.latest):
		return fmt.Errorf("pg: ping: database schema is at version %d, this binary needs %d", version, s.latest)
	}
	return nil
}

// Subscribe returns a channel woken after each commit that touches topic, by
// any replica, after the listener reconnects, and every pollInterval.
func (s *Store) Subscribe(topic string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(topic)
}

func (s *Store) connectListener(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig
	cfg.RuntimeParams["application_name"] = listenerName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		s.peers.listener.Store(conn.PgConn().PID())
	}
	return conn, err
}

func (s *Store) logListenerError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // Close
	}
	s.log.WarnContext(ctx, "pg: listener lost; reconnecting", slog.Duration("delay", reconnectDelay), slog.Any("error", err))
}

// wakeHandler turns notifications into wake-ups.
type wakeHandler struct {
	hub       *store.Hub
	recent    *recent
	peers     *peers
	log       *slog.Logger
	ready     chan struct{}
	self      string // this Store's writer (notifyChannel)
	connected sync.Once
}

func (h *wakeHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	topic := n.Payload
	if from, t, ok := strings.Cut(topic, " "); ok && strings.HasPrefix(from, "@") {
		if from[1:] == h.self {
			return nil // woken at the commit already
		}
		h.peers.seen()
		topic = t
	}
	if topic == store.LifecycleTopic {
		h.recent.foreign() // another replica's events
	}
	h.hub.Wake(topic)
	return nil
}

// HandleBacklog runs after every (re)connect, once LISTEN is in place:
// notifications sent while the connection was down are lost, so every
// subscriber is woken to re-query. It says hello to the other replicas
// (helloTopic), so that they announce their commits to this one again.
func (h *wakeHandler) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	first := false
	h.connected.Do(func() { first = true; close(h.ready) })
	if !first {
		h.log.InfoContext(ctx, "pg: listener reconnected; waking every subscriber")
	}
	h.recent.foreign()
	h.hub.WakeAll()
	if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, "@"+h.self+" "+helloTopic); err != nil && ctx.Err() == nil {
		h.log.WarnContext(ctx, "pg: say hello to other replicas; they will find this one within a second", slog.Any("error", err))
	}
	return nil
}

// wrap adds context to a non-nil *errp and maps driver errors to store
// errors, in this one place: no rows is store.ErrNotFound, a unique
// violation store.ErrConflict, text that is not UTF-8 store.ErrInvalid.
func wrap(errp *error, format string, args ...any) {
	err := *errp
	if err == nil {
		return
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation:
		err = fmt.Errorf("%w: %w", store.ErrConflict, err)
	case errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.CharacterNotInRepertoire || pgErr.Code == pgerrcode.UntranslatableCharacter):
		// Text Postgres refuses (invalid UTF-8, a NUL): the caller's data,
		// never the database's fault.
		err = fmt.Errorf("%w: %w", store.ErrInvalid, err)
	case unreachable(err):
		err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	*errp = fmt.Errorf("pg: "+format+": %w", append(args, err)...)
}

// limit applies the store.Store limit rules: <= 0 means 100, at most 1000.
func limit(n int) int {
	if n <= 0 {
		return defaultLimit
	}
	return min(n, maxLimit)
}

// now is t, or the current time if t is zero.
func now(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// fromDB maps a timestamptz column to UTC; NULL is the zero time.
func fromDB(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullJSON maps empty JSON to NULL.
func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// query builds a WHERE clause; ? in a condition is its next argument.
type query struct {
	where []string
	args  []any
}

func (q *query) and(cond string, args ...any) {
	for _, a := range args {
		q.args = append(q.args, a)
		cond = strings.Replace(cond, "?", fmt.Sprintf("$%d", len(q.args)), 1)
	}
	q.where = append(q.where, cond)
}

// sql returns "SELECT cols FROM table WHERE … ORDER BY order LIMIT n".
func (q *query) sql(cols, table, order string, n int) string {
	q.args = append(q.args, n)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT $%d",
		cols, table, strings.Join(q.where, " AND "), order, len(q.args))
}
