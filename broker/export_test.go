package broker

import "time"

// PoisonHash names an item in the shared quarantine, for tests that put
// one there by hand.
var PoisonHash = poisonHash

// SkewClock sets c's clock off by skew, as the clock of a machine that is
// not in sync.
func SkewClock(c *Config, skew time.Duration) { c.skew = skew }
