package http

import (
	"encoding/json"
	"log/slog"
	"net/http"
)

// writeJSON writes v as the JSON answer with status. Encoding errors after
// the header was sent can only be logged.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		s.log.DebugContext(r.Context(), "write response", slog.String("uri", r.URL.RequestURI()), slog.Any("error", err))
	}
}
