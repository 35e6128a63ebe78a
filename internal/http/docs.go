package http

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/go-chi/chi/v5"
	swaggerFiles "github.com/swaggo/files/v2"
	httpSwagger "github.com/swaggo/http-swagger/v2"

	"github.com/subagentd/subagentd/api"
	"github.com/subagentd/subagentd/internal/subagent"
)

// serveSpec serves the embedded OpenAPI document.
func serveSpec(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.OpenAPI)
}

func redirectDocs(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/docs/index.html", http.StatusFound)
}

// docsHandler serves Swagger UI (swaggo/files v2.0.2 can show OpenAPI 3.1)
// pointed at /openapi.yaml, the one copy of the document; the UI's own
// doc.json is not served (a second name for the spec would only drift). A
// file Swagger UI does not have is a NOT_FOUND problem (httpSwagger itself
// answers text/plain 404s, and 500s for names it cannot parse), and
// httpSwagger, which reads the raw request URI, sees only the clean path.
func (s *Server) docsHandler() http.HandlerFunc {
	swagger := httpSwagger.Handler(httpSwagger.URL("/openapi.yaml"))
	return s.h(func(w http.ResponseWriter, r *http.Request) error {
		file := chi.URLParam(r, "file")
		if file != "index.html" {
			if _, err := fs.Stat(swaggerFiles.FS, file); err != nil || !fs.ValidPath(file) {
				return subagent.Errorf(codeNotFound, "no file %q in /docs", clip(file, 100))
			}
		}
		r.RequestURI = "/docs/" + file
		swagger(w, r)
		return nil
	})
}

// Dashboard file names: one directory level, names with an extension.
// Anchored, because chi matches route regexps unanchored.
const (
	dirPattern   = `^[a-z][a-z0-9_-]*$`
	assetPattern = `^[A-Za-z0-9_-]+\.[A-Za-z0-9]+$`
)

// placeholder is served at "/" when no dashboard is configured.
const placeholder = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>subagentd</title></head>
<body><h1>subagentd</h1><p>No dashboard is built into this server. The API is described at <a href="/docs">/docs</a>.</p></body></html>
`

// dashboardIndex serves the dashboard's index.html, or the placeholder.
func (s *Server) dashboardIndex(w http.ResponseWriter, r *http.Request) error {
	if s.dashboard == nil {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(placeholder))
		return nil
	}
	return s.serveDashboard(w, r, "index.html")
}

// dashboardAsset serves one static file of the dashboard.
func (s *Server) dashboardAsset(w http.ResponseWriter, r *http.Request) error {
	name := chi.URLParam(r, "asset")
	if dir := chi.URLParam(r, "dir"); dir != "" {
		name = dir + "/" + name
	}
	return s.serveDashboard(w, r, name)
}

func (s *Server) serveDashboard(w http.ResponseWriter, r *http.Request, name string) error {
	if s.dashboard == nil {
		return subagent.Errorf(codeNotFound, "no dashboard file %q", name)
	}
	info, err := fs.Stat(s.dashboard, name)
	switch {
	case errors.Is(err, fs.ErrNotExist), err == nil && info.IsDir():
		return subagent.Errorf(codeNotFound, "no dashboard file %q", name)
	case err != nil:
		return fmt.Errorf("dashboard file %s: %w", name, err)
	}
	tag, err := s.dashboardETag(name)
	if err != nil {
		return err
	}
	// A browser asks again on every load (the names carry no version) and
	// gets a 304 without the body while the file is the same.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", tag)
	http.ServeFileFS(w, r, s.dashboard, name)
	return nil
}

// dashboardETag is a dashboard file's ETag, a hash of its bytes, worked out
// once per file.
func (s *Server) dashboardETag(name string) (string, error) {
	if tag, ok := s.dashTags.Load(name); ok {
		return tag.(string), nil
	}
	b, err := fs.ReadFile(s.dashboard, name)
	if err != nil {
		return "", fmt.Errorf("dashboard file %s: %w", name, err)
	}
	sum := sha256.Sum256(b)
	tag := `"` + hex.EncodeToString(sum[:16]) + `"`
	s.dashTags.Store(name, tag)
	return tag, nil
}
