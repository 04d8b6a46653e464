// Package pluginpb is the contract between a streamer worker and a model
// plugin: the gRPC service in model.proto (Go code generated from it by
// `make proto`) and the handshake constants below. Go plugins do not use it
// directly; they call the SDK in model/plugin/sdk. Plugins in other languages
// implement it by hand, as follows.
//
// # Starting
//
// A worker starts the plugin binary with no arguments and with its own
// environment plus:
//
//	STREAMER_PLUGIN=<MagicCookieValue>   the magic cookie (MagicCookieKey=MagicCookieValue)
//	PLUGIN_PROTOCOL_VERSIONS=1           the protocol versions the worker speaks (ProtocolVersion)
//	PLUGIN_MIN_PORT, PLUGIN_MAX_PORT     a port range, for plugins that listen on TCP
//	CUDA_VISIBLE_DEVICES                 inherited: the card of the worker's slot
//
// A program started without the cookie was not started by streamer: it should
// say so on stderr and exit with status 1.
//
// # Handshake
//
// The plugin starts a gRPC server (HTTP/2, no TLS) on a Unix socket it
// creates, or on 127.0.0.1 at a port within the range, serving the
// streamer.plugin.v1.Model service. Then it writes exactly one line to
// stdout and flushes it:
//
//	1|1|unix|/tmp/plugin123/model.sock|grpc
//
// The fields are: the go-plugin core protocol version (always 1); the
// streamer plugin protocol version (ProtocolVersion); the network, "unix" or
// "tcp"; the address (a socket path, or 127.0.0.1:PORT); and the RPC protocol,
// which must be "grpc". The worker refuses a plugin that prints anything
// else, exits, or prints nothing within its start timeout (a few seconds),
// with an error naming the binary and what it expected. Load the model in
// Init, not before the handshake.
//
// After the handshake the worker reads and discards the plugin's stdout:
// write logs to stderr, which the server log shows tagged with the worker's
// slot.
//
// # Calls
//
// The worker calls Init once, then opens one Predict stream and sends each
// batch on it as a PredictRequest; the plugin answers each with one
// PredictResponse, in order, before the next batch is sent. Each item and
// each output is one msgpack-encoded value. A PredictResponse holds exactly
// one output per item, or every item of the batch fails with an error saying
// so; item_errors fails single items, error the whole batch. A plugin
// answers one batch at a time.
//
// A plugin that dies is a crash of its worker: the worker exits, the
// supervisor restarts it (with a new copy of the plugin) and retries the
// batch elsewhere, and an item that keeps killing plugins is isolated and
// refused. A Predict that hangs past the server's --worker-timeout is
// handled the same way.
//
// # Stopping
//
// When its worker stops, the plugin is asked to stop through
// plugin.GRPCController/Shutdown (an empty request and reply, from
// go-plugin's own contract); a plugin still running two seconds later (one
// that does not serve Shutdown, say) is killed. The plugin runs in a process
// group of its own, and what it started and left in that group is killed
// with it. On Linux a plugin also receives SIGKILL the moment its worker
// dies, so it is never left behind.
//
// Large batches: the worker sends messages of any size up to the server's
// batch byte limit, so lift the gRPC server's default 4 MiB message limits.
package pluginpb
