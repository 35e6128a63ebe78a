// Package web holds the dashboard: static HTML, ES-module JavaScript and CSS,
// embedded into the binary so the service needs no build step, no CDN and no
// files on disk. internal/http serves FS at "/".
//
// The page talks only to the service's own HTTP API (api/openapi.yaml), whose paths
// are built in static/paths.js. All state lives in one store (store.js);
// the views are modules by job: tree.js (filtered, virtualised session
// tree with roll-ups), overview.js (the first view), session.js (head with
// the API's usage sums, a tree's token budget bar with a raise for a spent,
// paused one, run cards, actions and tree controls — cancel a tree,
// dispose a root's tree or a continuable child, asked first — composer), transcript.js (conversation and event log; a
// long log is drawn from its end, the turns above as the reader nears them),
// trace.js (nested spans of a tree on one time axis), search.js (search
// inside conversations), delegate.js (start forms), providers.js,
// webhooks.js (the Webhooks page: endpoints, secrets shown once, the
// delivery log), approvals.js (the approvals inbox: a header badge and a
// card per pending approval, kept live by approval/requested and
// approval/decided on the lifecycle stream) and auth.js (sign-in); app.js
// wires them and routes deep links (#s=<session>&r=<run> plus the filter,
// #v=webhooks and #v=approvals for the pages).
// index.html loads them as one script, dashboard.js (bundle.go); before
// that, a few lines of its own send the page's first reads (the sign-in
// check, the tree's first page, a linked session's newest events), whose
// answers boot.js, app.js's first import, takes.
//
// It loads the history once (its first page drawn before the rest is
// read, and the one read at load drawn before that), then follows
// GET /v1/events; a reconnect
// resumes after the stream's cursor (Last-Event-ID, or ?after= when the
// stream is recreated) and reloads nothing. A session's log is read in
// pages from GET /v1/sessions/{id}/events and then followed on its stream
// after the last seq; events already shown are dropped, so a reconnect
// never duplicates or loses a row.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS is the dashboard rooted at its static files: index.html is at its
// root, and with them dashboard.js, app.js with every module it imports in
// one script (bundle.go), which is what index.html loads.
var FS fs.FS = mustBundle(mustSub(static, "static"))

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		// fs.Sub fails only for an invalid path; "static" is a constant.
		panic(err)
	}
	return sub
}

// mustBundle adds dashboard.js to fsys. The modules are embedded, so a
// module bundle cannot read fails every test of this package, not a
// running server.
func mustBundle(fsys fs.FS) fs.FS {
	b, err := bundle(fsys, "app.js")
	if err != nil {
		panic(err)
	}
	return withFile{FS: fsys, name: "dashboard.js", data: b}
}
