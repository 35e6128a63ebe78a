// Package web holds the dashboard: static HTML, ES-module JavaScript and CSS,
// embedded into the binary so the service needs no build step, no CDN and no
// files on disk. internal/http serves FS at "/".
//
// The page talks only to the service's own HTTP API (DESIGN §3): it lists
// providers, shows a live tree of sessions fed by GET /v1/events, renders the
// selected session's log from GET /v1/sessions/{id}/stream, messages root
// sessions' own agents, and starts, steers, follows up, interrupts, cancels
// and disposes children. It resumes
// both SSE streams after a disconnect with ?after=<last id> and drops events
// it has already shown, so a reconnect never duplicates or loses a row.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS is the dashboard rooted at its static files: index.html is at its root.
var FS fs.FS = mustSub(static, "static")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		// fs.Sub fails only for an invalid path; "static" is a constant.
		panic(err)
	}
	return sub
}
