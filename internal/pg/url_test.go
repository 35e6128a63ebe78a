package pg_test

import (
	"testing"

	"github.com/subagentd/subagentd/internal/pg"
)

func TestConnString_PlainTextOnlyToThisMachine(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, c := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/db", "postgres://postgres@127.0.0.1:5432/db?sslmode=disable"},
		{"postgres://u@localhost/db?pool_max_conns=8", "postgres://u@localhost/db?pool_max_conns=8&sslmode=disable"},
		{"postgresql://u@[::1]:5432/db", "postgresql://u@[::1]:5432/db?sslmode=disable"},
		{"postgres:///db?host=/var/run/postgresql", "postgres:///db?host=%2Fvar%2Frun%2Fpostgresql&sslmode=disable"},
		{"postgres://u@127.0.0.1:5432,127.0.0.2:5433/db", "postgres://u@127.0.0.1:5432,127.0.0.2:5433/db?sslmode=disable"},
		// Unchanged: a remote host, one remote host among several, an
		// explicit sslmode, a keyword/value DSN.
		{"postgres://u@db.example.com/db", "postgres://u@db.example.com/db"},
		{"postgres://u@127.0.0.1:5432,10.0.0.2:5432/db", "postgres://u@127.0.0.1:5432,10.0.0.2:5432/db"},
		{"postgres://u@127.0.0.1/db?sslmode=require", "postgres://u@127.0.0.1/db?sslmode=require"},
		{"postgres://u@example.com/db?host=/tmp", "postgres://u@example.com/db?host=%2Ftmp&sslmode=disable"},
		{"host=127.0.0.1 dbname=db", "host=127.0.0.1 dbname=db"},
	} {
		if got := pg.ConnString(c.in); got != c.want {
			t.Errorf("ConnString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	t.Setenv("PGSSLMODE", "require")
	if got := pg.ConnString("postgres://u@127.0.0.1/db"); got != "postgres://u@127.0.0.1/db" {
		t.Errorf("with PGSSLMODE set: %q", got)
	}
}
