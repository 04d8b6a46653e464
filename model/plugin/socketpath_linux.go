package plugin

// MaxSocketPath is the longest path a Unix socket may have here: the 108
// bytes of sun_path less the NUL that ends it.
const MaxSocketPath = 107
