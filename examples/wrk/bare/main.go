// Command bare is the yardstick for streamer's HTTP overhead: a plain
// net/http server whose POST /predict decodes {"inputs": [...]} with
// encoding/json and answers {"outputs": [...]} with the same items, as the
// echo model would, but with no queue, no batching and no worker process.
// Load it and `streamer serve --model echo` with the same client, side by
// side, to see what streamer's own path costs.
//
//	go run ./examples/wrk/bare --listen 127.0.0.1:5006
//
// With --listen 127.0.0.1:0 it picks a free port and prints it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5006", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", predict)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	// Port 0 picks a free port; the line below tells scripts which.
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
	fmt.Println("listening on", l.Addr())
	if err := http.Serve(l, mux); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

// predict echoes the request's inputs as its outputs.
func predict(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Inputs []json.RawMessage `json:"inputs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"malformed JSON body"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"outputs": req.Inputs})
}
