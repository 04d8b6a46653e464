package broker

// PoisonHash names an item in the shared quarantine, for tests that put
// one there by hand.
var PoisonHash = poisonHash
