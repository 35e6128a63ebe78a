package pg

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// helloTopic is the wake-up a Store sends in its writer's name each time
// its listener is LISTENing, so that the other replicas learn at once that
// it listens (peers). Nothing subscribes to it.
const helloTopic = "replica"

// peers tells a Store's writer whether another replica may be listening
// on its database, so that a lone replica does not announce its commits:
// their wake-ups would reach nobody but its own listener, which skips
// them, and each cost the database a transaction
// (docs/architecture.md §5). Every replica's LISTEN connection is named
// listenerName; look counts those of the database but the Store's own. A
// look that fails counts as a peer.
//
// A replica that starts, or whose listener reconnects, is seen at once:
// its hello (helloTopic) reaches the listeners already running, which
// call seen. A commit announced to nobody in between is no worse off than
// one whose wake-up is lost: that replica's subscribers read it at their
// next poll (pollInterval), as they do after any lost NOTIFY.
type peers struct {
	log *slog.Logger
	// listener is the backend pid of the Store's own LISTEN connection.
	listener atomic.Uint32

	mu      sync.Mutex
	present bool
	// signs counts the wake-ups of other replicas' writers, so that a
	// look that started before one cannot undo what it proved.
	signs uint64
}

// newPeers assumes a peer until the first look.
func newPeers(log *slog.Logger) *peers {
	return &peers{log: log, present: true}
}

// anyone reports whether another replica may be listening.
func (p *peers) anyone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.present
}

// seen records a wake-up from another replica's writer.
func (p *peers) seen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signs++
	p.set(true)
}

// look asks the database whether a listener other than the Store's own is
// connected to it.
func (p *peers) look(ctx context.Context, pool *pgxpool.Pool) {
	p.mu.Lock()
	signs := p.signs
	p.mu.Unlock()
	found := true
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND pid <> $2)`,
		listenerName, int64(p.listener.Load())).Scan(&found)
	if err != nil {
		found = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if found || p.signs == signs {
		p.set(found)
	}
}

// set records whether a peer is present, saying so when that changes.
// p.mu is held.
func (p *peers) set(present bool) {
	if p.present == present {
		return
	}
	p.present = present
	if present {
		p.log.Info("pg: another replica listens on this database; announcing commits")
	} else {
		p.log.Info("pg: no other replica listens on this database; commits are not announced until one does")
	}
}
