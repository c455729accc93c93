// Package api serves the agent's HTTP API under /v1. This is its first
// slice: health and describe; the full admin API (create, stop, pause, ...)
// is built on the same handler.
package api

import (
	"encoding/json"
	"net/http"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Describer is what the API needs of the coordinator.
type Describer interface {
	Describe() []coordinator.MirrorStatus
}

// Handler returns the API's routes.
func Handler(d Describer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /v1/mirrors", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, mirrorapi.DescribeResponse{Mirrors: d.Describe()})
	})
	mux.HandleFunc("GET /v1/mirrors/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		for _, m := range d.Describe() {
			if m.Name == name {
				writeJSON(w, http.StatusOK, m)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, mirrorapi.Error{Code: "MIRROR_NOT_FOUND", Message: "no mirror named " + name})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
