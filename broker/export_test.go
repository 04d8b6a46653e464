package broker

import "time"

// PoisonHash names an item in the shared quarantine, for tests that put
// one there by hand.
var PoisonHash = poisonHash

// SkewClock sets c's clock off by skew, as the clock of a machine that is
// not in sync.
func SkewClock(c *Config, skew time.Duration) { c.skew = skew }

// SlowBeats makes a node beat every every rather than every second: its
// beats then come from its start and its events alone.
func SlowBeats(c *NodeConfig, every time.Duration) { c.beatEvery = every }
