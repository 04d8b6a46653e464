// Package pluginpb is the contract between a streamer worker and a model
// plugin: the gRPC service in model.proto (Go code generated from it by
// `make proto`), go-plugin's stopping service in controller.proto (written
// out for other languages; no Go code is generated from it) and the
// handshake constants below. Go plugins do not use it directly; they call
// the SDK in model/plugin/sdk. Plugins in other languages implement it by
// hand, as follows: this text, the file model/plugin/pluginpb/doc.go (also
// shown by `go doc model/plugin/pluginpb`), is the whole contract beside
// the two .proto files, and needs no Go to read.
//
// # Starting
//
// A worker starts the plugin binary with no arguments and with its own
// environment plus:
//
//	STREAMER_PLUGIN=6f3c1e0a-streamer-model-plugin  the magic cookie (MagicCookieKey=MagicCookieValue)
//	PLUGIN_PROTOCOL_VERSIONS=1                      the protocol versions the worker speaks (ProtocolVersion)
//	PLUGIN_UNIX_SOCKET_DIR=<dir>                    the private directory to make the socket in
//	PLUGIN_CLIENT_CERT=<PEM>                        the worker's certificate (see TLS below)
//	CUDA_VISIBLE_DEVICES                            inherited: the card of the worker's slot
//
// The cookie's variable is STREAMER_PLUGIN and its value exactly
// 6f3c1e0a-streamer-model-plugin (MagicCookieKey and MagicCookieValue in
// handshake.go): a plugin compares the two strings, and refuses to run
// when they differ. PLUGIN_PROTOCOL_VERSIONS is a comma-separated list (one version today).
// go-plugin also sets PLUGIN_MIN_PORT and PLUGIN_MAX_PORT, for plugins that
// listen on TCP: a streamer plugin listens on its Unix socket, and ignores
// them.
//
// A program started without the cookie was not started by streamer: it should
// say so on stderr and exit with status 1.
//
// # Handshake
//
// The plugin starts a gRPC server on a Unix socket it creates in a
// directory of its own inside PLUGIN_UNIX_SOCKET_DIR (a private directory,
// mode 0700, that the worker made for it; what the plugin adds to its path
// must fit in plugin.SocketNameRoom, 24 bytes, slashes included, as
// "/p1234567/model.sock" does), serving the
// streamer.plugin.v1.Model service over TLS with client certificates
// required. Then it writes exactly one line to stdout and flushes it:
//
//	1|1|unix|/tmp/streamer-plugins-42-1/plugin-7/p/model.sock|grpc|CERT
//
// The fields are: the go-plugin core protocol version (always 1); the
// streamer plugin protocol version (ProtocolVersion); the network, "unix";
// the socket's path; the RPC protocol, which must be "grpc"; and the
// plugin's certificate.
//
// TLS: the worker makes a certificate for each plugin it starts and passes
// it, PEM encoded, in PLUGIN_CLIENT_CERT. The plugin makes a self-signed
// certificate of its own, valid for the name "localhost" and usable for
// server authentication, accepts only clients presenting the worker's
// certificate, and writes its own in the handshake's last field as base64
// (standard alphabet, no padding) of its DER bytes. So no other process,
// even one that can reach the socket, can call the plugin.
// examples/python-plugin does all this with grpcio and cryptography.
//
// The worker refuses a plugin that prints anything
// else, exits, or prints nothing within its start timeout (nine tenths of
// --init-timeout under streamer serve; plugin.DefaultStartTimeout, 5 s,
// for a Go program that sets none), with an error naming the binary and
// what it expected. Load the model in Init, not before the handshake.
//
// After the handshake the worker reads whatever the plugin writes on stdout
// and stderr, however long its lines, into the server log, tagged with the
// worker's slot: write logs to stderr. A first line over 64 KiB is no
// handshake.
//
// # Calls
//
// The worker calls Init once, then opens one Predict stream and sends each
// batch on it as a PredictRequest; the plugin answers each with one
// PredictResponse, in order, before the next batch is sent. Each item and
// each output is one msgpack-encoded value. A PredictResponse holds exactly
// one output per item, or every item of the batch fails with an error saying
// so; item_errors fails single items, error the whole batch. A plugin
// answers one batch at a time, and sends nothing but those answers.
//
// Each PredictRequest carries an id, and its answer echoes it. A plugin that
// echoes ids has each answer checked against its batch; one that never does
// (built before ids were added) is answered by order, and sent each batch on
// a Predict stream of its own, which the worker closes once the batch is
// answered, so that an answer sent twice cannot pass for the next batch's.
// Either way, an answer
// that arrives when no batch waits for one, or that carries another batch's
// id, kills the plugin as a crash of its worker: its callers must never get
// another batch's results.
//
// A Predict stream that the plugin ends before it answers a batch,
// returning from its handler with an error (an exception raised) or
// without one, fails that batch as a batch's error does (500, with the
// error's message, or saying that the stream ended): the plugin lives on,
// and the next batch goes on a new stream. An output that is empty (no
// bytes, which is no msgpack value) and has no item_errors entry fails its
// item, saying so.
//
// # Items and outputs
//
// An item is one msgpack value, as the client's request gave it:
//
//   - POST /predict in JSON: each input becomes the msgpack value of its
//     JSON: a string a str, true and false bools, null nil, an integer an
//     int (a uint64 past the int64 range, a float64 past the uint64
//     range), any other number a float64, an array an array and an object
//     a map with str keys. A string that is not valid UTF-8, or has a lone
//     surrogate escape, refuses its item (400) rather than reach the
//     plugin with U+FFFD in its place.
//   - POST /predict in msgpack: each input as the client encoded it (a
//     bin stays a bin).
//   - The Open Inference Protocol (/v2/models/NAME/infer, REST or gRPC):
//     the one input, of datatype BYTES, one element per item. An element
//     that is valid UTF-8 arrives as a str, any other as a bin: a plugin
//     that wants bytes takes both.
//
// An output is one msgpack value too, which the server writes back as the
// client asked:
//
//   - /predict in JSON: a str as a JSON string, a bin as a base64 string,
//     a timestamp as an RFC 3339 string, a map's keys as strings, NaN and
//     the infinities as null. A str that is not valid UTF-8 and an
//     extension of another type have no JSON form: the request fails with
//     a 500 naming the output (bytes go as a bin).
//   - /predict in msgpack: the output as it is.
//   - The Open Inference Protocol: one BYTES element, the bytes of a str or
//     a bin, or the JSON text of any other value (none for one holding a str
//     that is not valid UTF-8: a 500, as above); in the JSON form of an
//     answer, that element as a JSON string, or, when its bytes are not
//     valid UTF-8, a 400 telling the client to ask for binary data.
//
// A plugin fails one item through item_errors (the client gets 422 and the
// message) and a whole batch through error (500).
//
// A plugin that dies is a crash of its worker: the worker exits, the
// supervisor restarts it (with a new copy of the plugin) and retries the
// batch elsewhere, and an item that keeps killing plugins is isolated and
// refused. A Predict that hangs past the server's --worker-timeout is
// handled the same way.
//
// # Dying
//
// The worker says why its plugin died, in the server log, the slot's last
// error and the error of each item it killed: the plugin's exit status or
// signal, then what it printed (on stderr, or on stdout after the
// handshake), chosen thus:
//
//   - The first line of the plugin's life that begins with "panic: " or
//     "fatal error: " (these very bytes, at the start of the line), as a Go
//     program's panic or fatal error begins: that line alone, cut to 4 KiB,
//     as "exit status 2; its last words: panic: MESSAGE". The lines after
//     it (a Go panic's goroutines) go to the log only.
//   - Where no such line came, its last lines that are not blank, each
//     trimmed of white space at both ends: of the last three, as many as
//     fit in 512 bytes together, the oldest left out first (the last one
//     alone is cut to 512 bytes), joined by " | ", as "exit status 1; its
//     last lines: A | B | C". A Python traceback ends with its exception's
//     line, so its crash says that.
//
// A plugin in any language can give the reason itself: write one line
// that begins with "fatal error: " (or "panic: ") on stderr, then exit.
// From a gRPC handler, exit the process itself (Python's os._exit, not
// sys.exit, whose SystemExit grpcio's handler threads do not catch: the
// batch is left unanswered until the server's --worker-timeout).
// Write it only when dying, since the first such line is the one kept.
// Where the runtime's last lines say little (Node.js ends an uncaught
// exception's stack with a line giving its own version), do it from the
// handler of uncaught exceptions, writing the exception's message.
//
// # Stopping
//
// When its worker stops, the plugin is asked to stop through
// plugin.GRPCController/Shutdown (an empty request and reply, from
// go-plugin's own contract, written out in controller.proto beside
// model.proto), served on the same socket, with the same TLS, as the
// model; a plugin still running two seconds later (one that does not
// serve Shutdown, say) is killed. The plugin runs in a process
// group of its own, and what it started and left in that group is killed
// with it. On Linux a plugin also receives SIGKILL the moment its worker
// dies, and the rest of its group right after, however the worker died
// (kill -9, the OOM killer): neither it nor what it started is left behind.
// A process it moves out of the group (setsid) is its own to stop.
//
// Signals: ignore SIGTERM, SIGINT and SIGHUP. A service manager stopping
// or reloading the server (systemd's KillMode=control-group), or a
// terminal that hangs up, signals every process of the server, the
// plugins included; the worker stops its plugin through Shutdown, once
// the batches it holds are answered. A plugin that dies of such a signal
// is a crash of its worker, and its batch runs again elsewhere.
//
// Output: write logs to stderr. What a plugin writes on stdout after its
// handshake goes into the server log too, tagged as stderr; before it, any
// line but the handshake fails the start.
//
// Large batches: the worker sends messages of any size up to the server's
// batch byte limit, so lift the gRPC server's default 4 MiB message limits.
package pluginpb
