// Package migrations holds subagentd's Postgres schema as golang-migrate
// files (NNNNNN_name.up.sql / .down.sql), embedded so the binary migrates its
// own database at start-up (internal/pg.Migrate).
package migrations

import "embed"

// FS holds every migration file at its root.
//
//go:embed *.sql
var FS embed.FS
