package http

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
)

// dbProxy forwards TCP connections to a database. cut closes every
// connection and refuses new ones (the database is down); freeze keeps
// them open but forwards nothing more (a network partition); restore
// forwards again.
type dbProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   string // "", "cut" or "frozen"
	conns  []net.Conn
	frozen chan struct{} // closed by restore
}

func newDBProxy(t *testing.T, target string) *dbProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{t: t, ln: ln, target: target, frozen: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); p.restore(); p.closeAll() })
	go p.serve()
	return p
}

func (p *dbProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == "cut" {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies from src to dst, holding each chunk while frozen.
func (p *dbProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen, mode := p.frozen, p.mode
			p.mu.Unlock()
			if mode == "frozen" {
				<-frozen
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *dbProxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (p *dbProxy) cut() {
	p.mu.Lock()
	p.mode = "cut"
	p.mu.Unlock()
	p.closeAll()
}

func (p *dbProxy) freeze() {
	p.mu.Lock()
	p.mode = "frozen"
	p.mu.Unlock()
}

func (p *dbProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == "frozen" {
		close(p.frozen)
		p.frozen = make(chan struct{})
	}
	p.mode = ""
}

// url returns dbURL pointing at the proxy.
func (p *dbProxy) url(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// unavailableSetup is a server over a Postgres store reached through a
// proxy, with store calls bounded by bound.
func unavailableSetup(t *testing.T, bound time.Duration) (*testBundle, *dbProxy) {
	dbURL := pgtest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newDBProxy(t, u.Host)
	b := setup(t, withTokens, func(c *Config) { c.Store = store.Bounded(pgStoreAt(t, proxy.url(dbURL)), bound) })
	b.want(t, 200, with(tokenA, call{method: "GET", path: "/readyz"}))
	b.want(t, 201, with(tokenA, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "before"}}))
	return b, proxy
}

// wantUnavailable checks the answers of a replica whose database cannot
// be reached: /readyz is 503, and reads and writes are 503 UNAVAILABLE
// with Retry-After, each answered within the bound.
func wantUnavailable(t *testing.T, b *testBundle, within time.Duration) {
	t.Helper()
	for _, c := range []call{
		{method: "GET", path: "/readyz"},
		{method: "GET", path: "/v1/sessions"},
		{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "during"}},
	} {
		began := time.Now()
		r := b.do(t, with(tokenA, c))
		took := time.Since(began)
		if r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s %s with the database unreachable: %d %s (Retry-After %q), want 503 with Retry-After", c.method, c.path, r.status, r.body, r.header.Get("Retry-After"))
		}
		if code := r.problem(t).Code; c.path != "/readyz" && code != codeUnavailable {
			t.Fatalf("%s %s: code %s, want %s", c.method, c.path, code, codeUnavailable)
		}
		t.Logf("%s %s: 503 %s after %v", c.method, c.path, r.problem(t).Code, took)
		if took > within {
			t.Errorf("%s %s took %v to answer, want at most %v", c.method, c.path, took, within)
		}
	}
}

// TestUnavailable_DatabaseDown: with the database's connections closed
// and new ones refused, the replica is unready and answers 503, and it
// serves again once the database is back.
func TestUnavailable_DatabaseDown(t *testing.T) {
	t.Parallel()
	b, proxy := unavailableSetup(t, 2*time.Second)
	proxy.cut()
	wantUnavailable(t, b, 10*time.Second)

	proxy.restore()
	// The pool reconnects on the next call; nothing was lost before the cut.
	deadline := time.Now().Add(10 * time.Second)
	for b.do(t, with(tokenA, call{method: "GET", path: "/readyz"})).status != 200 {
		if time.Now().After(deadline) {
			t.Fatal("the replica is still unready 10s after the database came back")
		}
	}
	var list struct {
		Sessions []sessionJSON `json:"sessions"`
	}
	b.want(t, 200, with(tokenA, call{method: "GET", path: "/v1/sessions"})).decode(t, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Label != "before" {
		t.Fatalf("sessions after the outage = %+v, want the one created before it", list.Sessions)
	}
}

// TestUnavailable_DatabasePartitioned: with the database's connections
// open but silent, no request hangs: each gets its 503 once its store
// call's bound (or /readyz's) ran out — for a write taken into a group
// commit, once the commit's own bound (10 s) did.
func TestUnavailable_DatabasePartitioned(t *testing.T) {
	t.Parallel()
	b, proxy := unavailableSetup(t, 500*time.Millisecond)
	proxy.freeze()
	wantUnavailable(t, b, 15*time.Second)
}
