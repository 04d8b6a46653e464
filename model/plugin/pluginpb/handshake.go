package pluginpb

// The handshake a worker and its plugin agree on before any call. See the
// package documentation for the whole sequence.
const (
	// MagicCookieKey is the environment variable a worker sets when it starts
	// a plugin. It is not a security measure: it lets a plugin binary started
	// by hand say that it is a plugin instead of hanging.
	MagicCookieKey = "STREAMER_PLUGIN"
	// MagicCookieValue is the value of MagicCookieKey.
	MagicCookieValue = "6f3c1e0a-streamer-model-plugin"
	// ProtocolVersion is the version of this contract. It changes when
	// model.proto or the calls' meaning change incompatibly; a plugin built
	// for another version is refused at start.
	ProtocolVersion = 1
	// PluginName is the name the model service is dispensed under in
	// go-plugin's plugin sets.
	PluginName = "model"
)
